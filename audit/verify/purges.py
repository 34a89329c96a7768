"""Purges in verification: a signed ``purge`` checkpoint may remove the oldest records only
when they were older than the retention minimum (``MIN_RETENTION_DAYS``); with TSA roots
time-stamps must prove it, and with an archive directory the archive it names must be there,
match its SM3 and verify."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from audit.anchors import AnchorSet
from audit.archive import file_sm3, verify_archive
from audit.chain import Checkpoint, CheckpointKind, Verifier
from audit.config import MIN_RETENTION_DAYS
from audit.verify.anchors import AnchorTimes
from audit.verify.report import DAY_MS, ChainReport, Problem, ProblemKind


def purge_ok(cp: Checkpoint, report: ChainReport) -> bool:
    """Whether purge checkpoint ``cp`` is well formed and old enough; lists it in ``report.purges``
    if so, else adds ``purge_malformed`` / ``purge_too_early``."""
    x = cp.extra
    try:
        through = int(x["purged_through"])
        cutoff = int(x["cutoff_ms"])
        days = int(x["retention_days"])
        bytes.fromhex(str(x["anchor_hash"]))
    except (KeyError, ValueError, TypeError):
        report.problems.append(
            Problem(ProblemKind.PURGE_MALFORMED, f"purge checkpoint {cp.n} is malformed", checkpoint=cp.n)
        )
        return False
    if days < MIN_RETENTION_DAYS or cutoff > cp.time_ms - MIN_RETENTION_DAYS * DAY_MS or through > cp.tree_size:
        report.problems.append(
            Problem(
                ProblemKind.PURGE_TOO_EARLY,
                f"purge checkpoint {cp.n} removed records younger than {MIN_RETENTION_DAYS} days",
                seq=1,
                checkpoint=cp.n,
            )
        )
        return False
    report.purges.append(
        f"checkpoint {cp.n}: records up to {through} purged (older than {days} days), "
        f"archived as {x.get('archive', '?')}"
    )
    return True


def check_purges(
    chain: str,
    anchors: AnchorSet,
    cps: Sequence[Checkpoint],
    report: ChainReport,
    times: AnchorTimes,
    archive_dir: Path | None,
    archive_key: bytes | None,
    trusted: dict[str, Verifier],
) -> None:
    """Add to ``report`` the purges of ``chain`` that time-stamps do not prove old enough
    (``purge_unproven``, with ``times`` checked) and, with ``archive_dir``, archives that are
    missing, altered or do not verify."""
    problems = report.problems
    stamped = [
        (times.gen_ms[a.payload], a.checkpoint)
        for a in anchors.checkpoints
        if a.checkpoint.chain == chain and a.payload in times.gen_ms
    ]
    for cp in (cp for cp in cps if cp.kind is CheckpointKind.PURGE):
        through = int(cp.extra["purged_through"])
        days = int(cp.extra["retention_days"])
        if times.checked:
            purge_time = next((g for g, c in stamped if c.n == cp.n and c.payload() == cp.payload()), None)
            existed = min((g for g, c in stamped if c.tree_size >= through and c.n < cp.n), default=None)
            if purge_time is None or existed is None or purge_time - existed < days * DAY_MS:
                why = (
                    "the purge checkpoint has no verified time-stamp"
                    if purge_time is None
                    else "no time-stamped checkpoint shows the purged records existed before"
                    if existed is None
                    else f"time-stamps show the purged records were only {(purge_time - existed) // DAY_MS} days old"
                )
                problems.append(
                    Problem(
                        ProblemKind.PURGE_UNPROVEN,
                        f"purge checkpoint {cp.n} claims records up to {through} were older than {days} days: {why}",
                        seq=through,
                        checkpoint=cp.n,
                    )
                )
        if archive_dir is not None:
            _check_purge_archive(cp, archive_dir, archive_key, trusted, report)


def _check_purge_archive(
    cp: Checkpoint, archive_dir: Path, key: bytes | None, trusted: dict[str, Verifier], report: ChainReport
) -> None:
    name = str(cp.extra.get("archive", ""))
    path = archive_dir / name
    if not name or "/" in name or name.startswith(".") or not path.is_file():
        report.problems.append(
            Problem(
                ProblemKind.PURGE_ARCHIVE_MISSING,
                f"the archive {name!r} of purge checkpoint {cp.n} is missing",
                checkpoint=cp.n,
            )
        )
        return
    if file_sm3(path).hex() != str(cp.extra.get("archive_sm3", "")):
        report.problems.append(
            Problem(
                ProblemKind.PURGE_ARCHIVE_ALTERED,
                f"the archive {name} differs from the one purge checkpoint {cp.n} signed",
                checkpoint=cp.n,
            )
        )
        return
    for msg in verify_archive(path, list(trusted.values()), key):
        report.problems.append(Problem(ProblemKind.PURGE_ARCHIVE_INVALID, f"archive {name}: {msg}", checkpoint=cp.n))
