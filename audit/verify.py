"""Verification of a stored audit log against trusted SM2 public keys.

What is checked, per chain (docs/audit.md has the full list):

* checkpoints: canonical payload, SM2 signature by a trusted key, contiguous numbering,
  ``prev`` links, monotonic time and size, no gap longer than the tolerance between two
  checkpoints of a running writer, nothing but an open/recovery checkpoint after a close;
* records: contiguous sequence numbers from genesis (or from the last signed purge),
  ``h[seq] = SM3(h[seq-1] || body)`` equal to the stored hash, the head at every
  checkpoint's ``tree_size`` equal to the signed head, no checkpoint beyond the last record
  (truncation), indexed columns equal to the body;
* the unsigned tail after the last checkpoint is younger than the tolerance and (unless
  ``now_ms`` is ``None``) the last checkpoint of a running writer is recent.

A crash is not tampering: the writer that reopens a crashed chain re-verifies its tail and
seals it with a ``recovery`` checkpoint, which the report lists as a recovery.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit.anchors import AnchorSet
from audit.archive import file_sm3, verify_archive
from audit.chain import GENESIS, Checkpoint, CheckpointKind, SignedCheckpoint, Verifier, chain_hash
from audit.config import MIN_RETENTION_DAYS
from audit.errors import AuditEncodingError, AuditRangeError, UnknownChainError
from audit.records import MAX_SAFE_INT
from audit.stores.base import Store
from trust.compat import StrEnum

DAY_MS = 86_400_000

MAX_RECORD_PROBLEMS = 100
"""At most this many broken records (altered, missing, re-chained) are listed per chain; the
scan goes on to the end and one ``more_problems`` entry counts the ones not listed."""


class ProblemKind(StrEnum):
    """What a verification problem is about (``Problem.kind``; the CLI and ``VerifyLog`` print the value)."""

    ANCHOR_BAD_SIGNATURE = "anchor_bad_signature"
    ANCHOR_MISSING = "anchor_missing"
    ANCHOR_RECORD_ALTERED = "anchor_record_altered"
    ANCHOR_RECORD_MISSING = "anchor_record_missing"
    ANCHOR_TIMESTAMP_INVALID = "anchor_timestamp_invalid"
    ANCHOR_UNTRUSTED = "anchor_untrusted"
    CHECKPOINT_AFTER_CLOSE = "checkpoint_after_close"
    CHECKPOINT_BAD_SIGNATURE = "checkpoint_bad_signature"
    CHECKPOINT_CHAIN_BROKEN = "checkpoint_chain_broken"
    CHECKPOINT_COLUMNS_ALTERED = "checkpoint_columns_altered"
    CHECKPOINT_GAP = "checkpoint_gap"
    CHECKPOINT_MALFORMED = "checkpoint_malformed"
    CHECKPOINT_MISPLACED = "checkpoint_misplaced"
    CHECKPOINT_MISSING = "checkpoint_missing"
    CHECKPOINT_REGRESSED = "checkpoint_regressed"
    CHECKPOINT_TIME_FORGED = "checkpoint_time_forged"
    CHECKPOINT_UNTRUSTED_KEY = "checkpoint_untrusted_key"
    MORE_PROBLEMS = "more_problems"
    NO_CHECKPOINT = "no_checkpoint"
    PURGE_ARCHIVE_ALTERED = "purge_archive_altered"
    PURGE_ARCHIVE_INVALID = "purge_archive_invalid"
    PURGE_ARCHIVE_MISSING = "purge_archive_missing"
    PURGE_MALFORMED = "purge_malformed"
    PURGE_TOO_EARLY = "purge_too_early"
    PURGE_UNPROVEN = "purge_unproven"
    RECHAINED = "rechained"
    RECORD_ALTERED = "record_altered"
    RECORD_MISSING = "record_missing"
    RECORDS_AFTER_CLOSE = "records_after_close"
    SCHEMA_ALTERED = "schema_altered"
    STALE = "stale"
    STORE_MISSING = "store_missing"
    TAIL_UNSIGNED = "tail_unsigned"
    TRUNCATED = "truncated"


@dataclass(frozen=True, slots=True)
class Problem:
    kind: ProblemKind
    message: str
    seq: int | None = None
    """The first record concerned, when the problem is about records."""
    checkpoint: int | None = None


@dataclass(slots=True)
class ChainReport:
    chain: str
    records_checked: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    checkpoints_checked: int = 0
    last_checkpoint: int | None = None
    last_checkpoint_time_ms: int | None = None
    unsigned_tail: int = 0
    closed: bool = False
    recoveries: list[str] = field(default_factory=list)
    purges: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    last_record: int | None = None
    """The chain's last record in the store (whatever range was asked for), ``None`` if it has none."""
    out_of_range: bool = False
    """With ``start``: the chain has no record at or after it (and no signed checkpoint says it
    should), so none of its records was checked; its checkpoints were."""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first_broken(self) -> int | None:
        seqs = [p.seq for p in self.problems if p.seq is not None]
        return min(seqs) if seqs else None

    def to_json(self) -> dict[str, Any]:
        return {
            "chain": self.chain,
            "ok": self.ok,
            "first_broken": self.first_broken,
            "records_checked": self.records_checked,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "checkpoints_checked": self.checkpoints_checked,
            "last_checkpoint": self.last_checkpoint,
            "last_checkpoint_time_ms": self.last_checkpoint_time_ms,
            "unsigned_tail": self.unsigned_tail,
            "closed": self.closed,
            "recoveries": self.recoveries,
            "purges": self.purges,
            "last_record": self.last_record,
            "out_of_range": self.out_of_range,
            "problems": [
                {"kind": p.kind, "message": p.message, "seq": p.seq, "checkpoint": p.checkpoint} for p in self.problems
            ],
        }


@dataclass(slots=True)
class VerifyReport:
    chains: list[ChainReport]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.chains)

    @property
    def records_checked(self) -> int:
        return sum(c.records_checked for c in self.chains)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "chains": [c.to_json() for c in self.chains]}


def default_tolerance_ms(interval_s: int) -> int:
    """How late a checkpoint may be before its absence counts as a gap: 2 intervals + 60 s."""
    return 2 * interval_s * 1000 + 60_000


def verify_store(
    store: Store,
    keys: Iterable[Verifier],
    *,
    chain: str | None = None,
    start: int | None = None,
    end: int | None = None,
    now_ms: int | None = None,
    anchors: Sequence[SignedCheckpoint] | AnchorSet = (),
    tolerance_ms: Callable[[int], int] = default_tolerance_ms,
    progress: Callable[[int], None] | None = None,
    tsa_roots: Sequence[Any] | None = None,
    archive_dir: Path | None = None,
    archive_key: bytes | None = None,
) -> VerifyReport:
    """Verify every chain (or ``chain``) of ``store``; ``start``/``end`` restrict the record range.

    ``keys`` are the trusted public keys (``trust.sm2.Sm2PublicKey``); a checkpoint signed by
    any other key fails. ``now_ms`` enables the staleness check (pass the current time when
    verifying a live log). ``anchors`` are checkpoints an auditor kept earlier, or an
    :class:`~audit.anchors.AnchorSet` collected off the host (syslog stream, anchor files): each
    anchored checkpoint must verify and still be in the log byte for byte, each anchored record
    must still be there with the same chain hash (unless a verified purge removed it); this
    detects a rolled-back, wiped, truncated or rebuilt store, and a chain with anchors but no
    records or checkpoints left fails. With ``tsa_roots`` (RFC 3161 TSA trust anchors) every
    anchored time-stamp token must verify, no checkpoint may claim a time later than the TSA
    saw it, and every purge must be proved old enough by time-stamps (``purge_unproven``).
    With ``archive_dir`` the archive each purge names must exist there, match its SM3 and
    verify (``archive_key`` opens encrypted ones). Tables that were dropped or rebuilt with
    other columns or types are reported as ``schema_altered`` (nothing else is read then).

    Returns a :class:`VerifyReport`, one :class:`ChainReport` per chain (sorted by chain id);
    tampering is a result (``ok`` false, problems listed), not an exception. Every broken
    record is listed (up to :data:`MAX_RECORD_PROBLEMS` per chain), the first one first.

    Raises:
        UnknownChainError: ``chain`` names no chain of the store (its message lists those that exist).
        AuditRangeError: ``start`` or ``end`` outside ``1..2**53-1``, ``start > end``, or ``start``
            beyond the last record of the chain (of every chain, without ``chain``) where no signed
            checkpoint covers records from ``start`` on; where one does, the report says ``truncated``.
        AuditStoreError: the store failed while being read.
    """
    _check_range(start, end)
    trusted = {k.key_id: k for k in keys}
    given = anchors if isinstance(anchors, AnchorSet) else AnchorSet(checkpoints=list(anchors))
    # Only anchors whose signature verifies say anything about the log; the others are findings.
    anchor_set, forged = split_anchors(given, trusted)
    # No audit table at all is an empty store (anchors decide whether it should hold something);
    # some tables, or tables with other columns, are tampering.
    schema = store.schema_problems() if store.schema_exists() else []
    if schema:
        report = ChainReport(chain="*")
        report.problems.extend(Problem(ProblemKind.SCHEMA_ALTERED, f"{p}: the store was tampered with") for p in schema)
        return VerifyReport([report])
    anchored_chains = {a.checkpoint.chain for a in anchor_set.checkpoints} | {c for c, _ in anchor_set.records}
    if not store.schema_exists():
        if chain is not None and chain not in anchored_chains and chain not in forged:
            raise UnknownChainError(chain, [])
        wanted = {chain} if chain is not None else anchored_chains
        deleted = [gone_chain_report(c, anchor_set) for c in sorted(wanted & anchored_chains)]
        return VerifyReport(_with_forged(deleted, forged, chain))
    if chain is not None:
        if chain not in anchored_chains and chain not in forged:
            store.require_chain(chain)
        chains = [chain] if store.has_chain(chain) else []
    else:
        chains = store.chains()
    times = _anchor_times(anchor_set, trusted, tsa_roots)
    reports = []
    for c in chains:
        report = _verify_chain(
            store, c, trusted, start, end, now_ms, anchor_set, tolerance_ms, progress, times, archive_dir, archive_key
        )
        reports.append(report)
    wanted = {chain} if chain is not None else anchored_chains
    for gone in sorted(wanted & anchored_chains - set(chains)):
        reports.append(gone_chain_report(gone, anchor_set))
    reports = _with_forged(reports, forged, chain)
    beyond = [r for r in reports if r.out_of_range]
    if start is not None and beyond and len(beyond) == len(reports) and not any(r.problems for r in reports):
        raise AuditRangeError(_beyond_message(start, beyond))
    return VerifyReport(reports)


def split_anchors(anchors: AnchorSet, trusted: dict[str, Verifier]) -> tuple[AnchorSet, dict[str, list[Problem]]]:
    """``anchors`` less the checkpoints not signed by a trusted key or whose signature fails,
    and those as problems (``anchor_untrusted``, ``anchor_bad_signature``) by the chain they claim.

    The claims of an anchor (its chain, its number, what it covers) are only read once its
    SM2 signature verified: a forged one is reported as such, never as a deleted chain.
    """
    from trust.errors import InvalidSignature

    kept = AnchorSet(
        timestamps=dict(anchors.timestamps), records=dict(anchors.records), conflicts=dict(anchors.conflicts)
    )
    forged: dict[str, list[Problem]] = {}
    for a in anchors.checkpoints:
        c = a.checkpoint
        key = trusted.get(c.key_id)
        if key is None:
            problem = Problem(
                ProblemKind.ANCHOR_UNTRUSTED, f"anchor {c.n} is not signed by a trusted key", checkpoint=c.n
            )
        else:
            try:
                key.verify(a.signature, a.payload)
            except InvalidSignature:
                problem = Problem(
                    ProblemKind.ANCHOR_BAD_SIGNATURE, f"anchor {c.n} has an invalid signature", checkpoint=c.n
                )
            else:
                kept.checkpoints.append(a)
                continue
        forged.setdefault(c.chain, []).append(problem)
    return kept, forged


def _with_forged(reports: list[ChainReport], forged: dict[str, list[Problem]], chain: str | None) -> list[ChainReport]:
    """``reports`` with the problems of anchors that failed :func:`split_anchors` added, sorted by chain."""
    by_chain = {r.chain: r for r in reports}
    for c, problems in forged.items():
        if chain is not None and c != chain:
            continue
        report = by_chain.get(c)
        if report is None:
            report = by_chain[c] = ChainReport(chain=c)
        report.problems.extend(problems)
    return sorted(by_chain.values(), key=lambda r: r.chain)


def gone_chain_report(chain: str, anchors: AnchorSet) -> ChainReport:
    """The report of a chain that anchors name but the store does not hold at all (deleted)."""
    report = ChainReport(chain=chain)
    for a in (a for a in anchors.checkpoints if a.checkpoint.chain == chain):
        report.problems.append(
            Problem(
                ProblemKind.ANCHOR_MISSING,
                f"chain {chain!r} is gone from the store, but its checkpoint {a.checkpoint.n} "
                f"(covering {a.checkpoint.tree_size} records) was kept as an anchor: the chain was deleted",
                seq=a.checkpoint.tree_size or None,
                checkpoint=a.checkpoint.n,
            )
        )
    recs = sorted(seq for c, seq in anchors.records if c == chain)
    if recs:
        report.problems.append(
            Problem(
                ProblemKind.ANCHOR_RECORD_MISSING,
                f"chain {chain!r} is gone from the store, but records {recs[0]}..{recs[-1]} were shipped off the host",
                seq=recs[0],
            )
        )
    return report


def missing_store_report(anchors: AnchorSet, why: str, keys: Sequence[Verifier] = ()) -> VerifyReport:
    """The report when the store itself is gone (``why``) but anchors say it held chains.

    Only anchors whose signature verifies with one of ``keys`` count (see :func:`split_anchors`);
    the others are reported as ``anchor_untrusted`` / ``anchor_bad_signature``.
    """
    anchors, forged = split_anchors(anchors, {k.key_id: k for k in keys})
    chains = sorted({a.checkpoint.chain for a in anchors.checkpoints} | {c for c, _ in anchors.records})
    reports = [gone_chain_report(c, anchors) for c in chains]
    for r in reports:
        r.problems.insert(0, Problem(ProblemKind.STORE_MISSING, why))
    return VerifyReport(_with_forged(reports, forged, None))


@dataclass(slots=True)
class _AnchorTimes:
    """Verified RFC 3161 ``genTime`` (ms) per checkpoint payload, and tokens that failed."""

    checked: bool
    gen_ms: dict[bytes, int] = field(default_factory=dict)
    invalid: dict[bytes, str] = field(default_factory=dict)


def _anchor_times(anchors: AnchorSet, trusted: dict[str, Verifier], roots: Sequence[Any] | None) -> _AnchorTimes:
    if roots is None:
        return _AnchorTimes(checked=False)
    from audit.timestamping import TimestampError, verify_timestamp

    out = _AnchorTimes(checked=True)
    for payload, token in anchors.timestamps.items():
        try:
            out.gen_ms[payload] = verify_timestamp(token, payload, roots)
        except TimestampError as exc:
            out.invalid[payload] = str(exc)
    return out


def _check_anchors(
    store: Store,
    chain: str,
    trusted: dict[str, Verifier],
    anchors: AnchorSet,
    cps: Sequence[Checkpoint],
    report: ChainReport,
    times: _AnchorTimes,
    tolerance_ms: Callable[[int], int],
) -> None:
    from trust.errors import InvalidSignature

    problems = report.problems
    raw_by_n = {n: p for n, p, _ in store.raw_checkpoints(chain)}
    for a in (a for a in anchors.checkpoints if a.checkpoint.chain == chain):
        c = a.checkpoint
        key = trusted.get(c.key_id)
        if key is None:
            problems.append(
                Problem(ProblemKind.ANCHOR_UNTRUSTED, f"anchor {c.n} is not signed by a trusted key", checkpoint=c.n)
            )
            continue
        try:
            key.verify(a.signature, a.payload)
        except InvalidSignature:
            problems.append(
                Problem(ProblemKind.ANCHOR_BAD_SIGNATURE, f"anchor {c.n} has an invalid signature", checkpoint=c.n)
            )
            continue
        if raw_by_n.get(c.n) != a.payload:
            problems.append(
                Problem(
                    ProblemKind.ANCHOR_MISSING,
                    f"checkpoint {c.n} (covering {c.tree_size} records) that was anchored off the host is no "
                    "longer in the log: the log was rolled back, truncated, wiped or rewritten",
                    seq=c.tree_size if c.tree_size > 0 else None,
                    checkpoint=c.n,
                )
            )
        if times.checked:
            if a.payload in times.invalid:
                problems.append(
                    Problem(
                        ProblemKind.ANCHOR_TIMESTAMP_INVALID,
                        f"anchor {c.n}: {times.invalid[a.payload]}",
                        checkpoint=c.n,
                    )
                )
            gen = times.gen_ms.get(a.payload)
            if gen is not None and c.time_ms - gen > tolerance_ms(0):
                problems.append(
                    Problem(
                        ProblemKind.CHECKPOINT_TIME_FORGED,
                        f"checkpoint {c.n} claims a time {(c.time_ms - gen) // 1000} s later than the "
                        "time-stamping authority saw it",
                        checkpoint=c.n,
                    )
                )
    base_seq = max((int(cp.extra["purged_through"]) for cp in cps if cp.kind is CheckpointKind.PURGE), default=0)
    shipped = sorted((seq, h) for (c, seq), h in anchors.records.items() if c == chain and seq > base_seq)
    if shipped:
        stored = {seq: h for seq, _, h in store.iter_hashes(chain, shipped[0][0], shipped[-1][0])}
        missing = [seq for seq, _ in shipped if seq not in stored]
        altered = [
            seq for seq, h in shipped if seq in stored and (stored[seq] != h or (chain, seq) in anchors.conflicts)
        ]
        if missing:
            problems.append(
                Problem(
                    ProblemKind.ANCHOR_RECORD_MISSING,
                    f"{len(missing)} records shipped off the host are not in the log (first {missing[0]})",
                    seq=missing[0],
                )
            )
        if altered:
            problems.append(
                Problem(
                    ProblemKind.ANCHOR_RECORD_ALTERED,
                    f"{len(altered)} records differ from what was shipped off the host (first {altered[0]})",
                    seq=altered[0],
                )
            )


def _check_purges(
    chain: str,
    anchors: AnchorSet,
    cps: Sequence[Checkpoint],
    report: ChainReport,
    times: _AnchorTimes,
    archive_dir: Path | None,
    archive_key: bytes | None,
    trusted: dict[str, Verifier],
) -> None:
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


def _check_range(start: int | None, end: int | None) -> None:
    for name, value in (("start", start), ("end", end)):
        if value is not None and not 1 <= value <= MAX_SAFE_INT:
            raise AuditRangeError(f"the range {name} must be a record number from 1 to {MAX_SAFE_INT} (got {value})")
    if start is not None and end is not None and start > end:
        raise AuditRangeError(f"the range starts after it ends (start {start} > end {end})")


def _beyond_message(start: int, reports: Sequence[ChainReport]) -> str:
    def last(r: ChainReport) -> str:
        return str(r.last_record) if r.last_record is not None else "none"

    if len(reports) == 1:
        r = reports[0]
        if r.last_record is None:
            return f"record {start} is beyond the end of chain {r.chain!r}: it holds no records"
        return f"record {start} is beyond the end of chain {r.chain!r}: its last record is {r.last_record}"
    ends = ", ".join(f"{r.chain}: {last(r)}" for r in reports[:20]) + (", ..." if len(reports) > 20 else "")
    return f"record {start} is beyond the last record of every chain (last records: {ends})"


def _verify_checkpoints(
    store: Store,
    chain: str,
    trusted: dict[str, Verifier],
    report: ChainReport,
    tolerance_ms: Callable[[int], int],
) -> list[Checkpoint]:
    from trust.errors import InvalidSignature

    problems = report.problems
    good: list[Checkpoint] = []
    prev: Checkpoint | None = None
    expect_n = 1
    columns = {row[0]: row[1:] for row in store.checkpoint_columns(chain)}
    for n, payload, signature in store.raw_checkpoints(chain):
        try:
            cp = Checkpoint.from_payload(payload)
        except AuditEncodingError as exc:
            problems.append(Problem(ProblemKind.CHECKPOINT_MALFORMED, f"checkpoint {n}: {exc}", checkpoint=n))
            prev = None
            continue
        report.checkpoints_checked += 1
        if cp.n != n or cp.chain != chain:
            problems.append(
                Problem(ProblemKind.CHECKPOINT_MISPLACED, f"checkpoint stored as n={n} says n={cp.n}", checkpoint=n)
            )
            continue
        if columns.get(n) != (str(cp.kind), cp.time_ms, cp.tree_size):
            problems.append(
                Problem(
                    ProblemKind.CHECKPOINT_COLUMNS_ALTERED,
                    f"the kind, time or size columns of checkpoint {n} disagree with its signed payload",
                    checkpoint=n,
                )
            )
        key = trusted.get(cp.key_id)
        if key is None:
            problems.append(
                Problem(
                    ProblemKind.CHECKPOINT_UNTRUSTED_KEY, f"checkpoint {n} is signed by an untrusted key", checkpoint=n
                )
            )
            continue
        try:
            key.verify(signature, payload)
        except InvalidSignature:
            problems.append(
                Problem(ProblemKind.CHECKPOINT_BAD_SIGNATURE, f"checkpoint {n}: invalid signature", checkpoint=n)
            )
            continue
        if n != expect_n:
            problems.append(
                Problem(
                    ProblemKind.CHECKPOINT_MISSING, f"checkpoints {expect_n}..{n - 1} are missing", checkpoint=expect_n
                )
            )
        if prev is not None and n == prev.n + 1:
            if cp.prev != prev.digest():
                problems.append(
                    Problem(
                        ProblemKind.CHECKPOINT_CHAIN_BROKEN, f"checkpoint {n} does not link to {prev.n}", checkpoint=n
                    )
                )
            if cp.time_ms < prev.time_ms or cp.tree_size < prev.tree_size:
                problems.append(
                    Problem(ProblemKind.CHECKPOINT_REGRESSED, f"checkpoint {n} goes back in time or size", checkpoint=n)
                )
            if prev.kind is CheckpointKind.CLOSE:
                if cp.kind not in (CheckpointKind.OPEN, CheckpointKind.RECOVERY):
                    problems.append(
                        Problem(ProblemKind.CHECKPOINT_AFTER_CLOSE, f"checkpoint {n} follows a close", checkpoint=n)
                    )
                elif cp.tree_size != prev.tree_size:
                    problems.append(
                        Problem(
                            ProblemKind.RECORDS_AFTER_CLOSE,
                            f"records {prev.tree_size + 1}..{cp.tree_size} were added after the closing "
                            f"checkpoint {prev.n}",
                            seq=prev.tree_size + 1,
                            checkpoint=n,
                        )
                    )
            elif cp.time_ms - prev.time_ms > tolerance_ms(prev.interval_s) and cp.kind is CheckpointKind.RECOVERY:
                # The writer was down (crashed, restarted later): the signed recovery checkpoint
                # follows the previous one directly and seals what was written before the crash.
                report.recoveries.append(
                    f"checkpoint {n}: the writer was down for {(cp.time_ms - prev.time_ms) // 1000} s "
                    f"after checkpoint {prev.n}"
                )
            elif cp.time_ms - prev.time_ms > tolerance_ms(prev.interval_s):
                problems.append(
                    Problem(
                        ProblemKind.CHECKPOINT_GAP,
                        f"no checkpoint between {prev.n} and {n} for {(cp.time_ms - prev.time_ms) // 1000} s "
                        f"(interval {prev.interval_s} s): records or checkpoints may have been removed",
                        checkpoint=n,
                    )
                )
        elif n > 1 and prev is None and expect_n == 1:
            pass  # already reported as missing
        if cp.kind is CheckpointKind.RECOVERY:
            report.recoveries.append(
                f"checkpoint {n}: writer restarted after an unclean shutdown; "
                f"{cp.extra.get('unsigned_tail', 0)} unsigned records were intact and are now sealed"
            )
        if cp.kind is CheckpointKind.PURGE:
            if not _purge_ok(cp, report):
                continue
        prev = cp
        expect_n = n + 1
        good.append(cp)
    return good


def _purge_ok(cp: Checkpoint, report: ChainReport) -> bool:
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


def _verify_chain(
    store: Store,
    chain: str,
    trusted: dict[str, Verifier],
    start: int | None,
    end: int | None,
    now_ms: int | None,
    anchors: AnchorSet,
    tolerance_ms: Callable[[int], int],
    progress: Callable[[int], None] | None,
    times: _AnchorTimes | None = None,
    archive_dir: Path | None = None,
    archive_key: bytes | None = None,
) -> ChainReport:
    report = ChainReport(chain)
    problems = report.problems
    times = times if times is not None else _AnchorTimes(checked=False)
    cps = _verify_checkpoints(store, chain, trusted, report, tolerance_ms)
    if anchors:
        _check_anchors(store, chain, trusted, anchors, cps, report, times, tolerance_ms)
    _check_purges(chain, anchors, cps, report, times, archive_dir, archive_key, trusted)
    last_cp = cps[-1] if cps else None
    if last_cp is not None:
        report.last_checkpoint = last_cp.n
        report.last_checkpoint_time_ms = last_cp.time_ms
        report.closed = last_cp.kind is CheckpointKind.CLOSE

    # Where the records begin: genesis, or the anchor of the latest signed purge.
    base_seq, base_hash = 0, GENESIS
    for cp in cps:
        if cp.kind is CheckpointKind.PURGE:
            base_seq = int(cp.extra["purged_through"])
            base_hash = bytes.fromhex(str(cp.extra["anchor_hash"]))
    bounds = store.bounds(chain)
    report.last_record = bounds[1] if bounds is not None else None
    covered = max((cp.tree_size for cp in cps), default=0)
    # The last record that should be here: the last one stored, or the last one purged.
    present_end = bounds[1] if bounds is not None else base_seq
    if start is not None and start > max(present_end, base_seq):
        if covered > present_end and covered >= start:
            problems.append(
                Problem(
                    ProblemKind.TRUNCATED,
                    f"checkpoint covers records through {covered}, but the log ends at {present_end}",
                    seq=present_end + 1,
                )
            )
        else:
            report.out_of_range = True  # nothing asked for is, or should be, here
        return report
    if bounds is None:
        if covered > base_seq:
            problems.append(
                Problem(
                    ProblemKind.TRUNCATED,
                    f"checkpoint {last_cp.n if last_cp else '?'} covers records through {covered}, "
                    f"but no record after {base_seq} is left",
                    seq=base_seq + 1,
                )
            )
        return report

    # Where the scan starts, and the hash it chains from (None: unknown, the first record
    # present cannot be checked against its predecessor and the scan re-syncs to its hash).
    lo = base_seq + 1
    h: bytes | None = base_hash
    if start is not None and start > lo:
        lo, h = start, store.hash_at(chain, start - 1)
    if bounds[0] > lo:
        why = " (deleted without a signed purge)" if lo == base_seq + 1 else ""
        problems.append(Problem(ProblemKind.RECORD_MISSING, f"records {lo}..{bounds[0] - 1} are missing{why}", seq=lo))
        lo, h = bounds[0], None
    elif h is None:
        problems.append(Problem(ProblemKind.RECORD_MISSING, f"record {lo - 1} is missing", seq=lo - 1))
    hi = min(end, bounds[1]) if end is not None else bounds[1]
    n_checked, expect = _scan_records(store, chain, cps, lo, hi, h, base_seq, report, progress)
    report.records_checked = n_checked
    report.first_seq = lo
    report.last_seq = expect - 1
    last_present = expect - 1
    # Signed checkpoints within the requested range that reach beyond what is left.
    limit = end if end is not None else covered
    covered_here = max((cp.tree_size for cp in cps if cp.tree_size <= limit), default=0)
    if covered_here > last_present:
        problems.append(
            Problem(
                ProblemKind.TRUNCATED,
                f"checkpoint covers records through {covered_here}, but the log ends at {last_present}",
                seq=last_present + 1,
            )
        )
    elif last_present < hi:
        problems.append(
            Problem(ProblemKind.RECORD_MISSING, f"record {last_present + 1} is missing", seq=last_present + 1)
        )
    mismatch = store.column_mismatches(chain, lo, hi)
    if mismatch is not None:
        problems.append(
            Problem(
                ProblemKind.RECORD_ALTERED, f"indexed columns of record {mismatch} disagree with its body", seq=mismatch
            )
        )
    if end is None and last_cp is not None:
        report.unsigned_tail = max(0, last_present - covered)
        if report.unsigned_tail:
            if last_cp.kind is CheckpointKind.CLOSE:
                problems.append(
                    Problem(
                        ProblemKind.RECORDS_AFTER_CLOSE,
                        f"records {covered + 1}..{last_present} follow the closing checkpoint {last_cp.n}",
                        seq=covered + 1,
                    )
                )
            else:
                last_rec = next(iter(store.records(chain, last_present, last_present)), None)
                if last_rec is not None and last_rec.time_ms - last_cp.time_ms > tolerance_ms(last_cp.interval_s):
                    problems.append(
                        Problem(
                            ProblemKind.TAIL_UNSIGNED,
                            f"records {covered + 1}..{last_present} span beyond the checkpoint interval "
                            "without a checkpoint: checkpoints were removed",
                            seq=covered + 1,
                        )
                    )
        if (
            now_ms is not None
            and last_cp.kind is not CheckpointKind.CLOSE
            and now_ms - last_cp.time_ms > tolerance_ms(last_cp.interval_s)
        ):
            problems.append(
                Problem(
                    ProblemKind.STALE,
                    f"the log ends without a closing checkpoint and its last checkpoint ({last_cp.n}) is "
                    f"{(now_ms - last_cp.time_ms) // 1000} s old: its tail was truncated, "
                    "or its writer crashed "
                    "and has not been restarted (restarting it seals the tail)",
                    seq=covered + 1 if report.unsigned_tail == 0 else None,
                    checkpoint=last_cp.n,
                )
            )
    elif end is None and last_cp is None and bounds is not None:
        report.unsigned_tail = last_present - lo + 1
        first = next(iter(store.records(chain, lo, lo)), None)
        last_rec = next(iter(store.records(chain, last_present, last_present)), None)
        if first is not None and last_rec is not None and last_rec.time_ms - first.time_ms > tolerance_ms(60):
            problems.append(Problem(ProblemKind.NO_CHECKPOINT, "no signed checkpoint covers these records", seq=lo))
        elif now_ms is not None and first is not None and now_ms - first.time_ms > tolerance_ms(60):
            problems.append(Problem(ProblemKind.NO_CHECKPOINT, "no signed checkpoint covers these records", seq=lo))
    return report


def _scan_records(
    store: Store,
    chain: str,
    cps: Sequence[Checkpoint],
    lo: int,
    hi: int,
    h: bytes | None,
    base_seq: int,
    report: ChainReport,
    progress: Callable[[int], None] | None,
) -> tuple[int, int]:
    """Re-chain records ``lo..hi`` from ``h``; add every broken record to ``report.problems``.

    A record whose hash does not chain is reported and the scan re-syncs to its stored hash
    (to the signed head when a checkpoint signs it), so each further altered record is reported
    on its own; a gap is reported and the scan re-syncs to the stored hash of the next record
    present (which therefore cannot be checked itself). At a checkpoint's ``tree_size`` the
    chain must have the signed head, else the records since the last signed head were
    re-chained (reported once until the chain is back in step). Returns ``(records scanned,
    the sequence number after the last one)``.
    """
    heads: dict[int, list[Checkpoint]] = {}
    for cp in cps:
        if lo <= cp.tree_size <= hi:
            heads.setdefault(cp.tree_size, []).append(cp)
    problems = report.problems
    listed = 0
    unlisted = 0
    first_unlisted = 0

    def note(p: Problem) -> None:
        nonlocal listed, unlisted, first_unlisted
        if listed < MAX_RECORD_PROBLEMS:
            problems.append(p)
            listed += 1
        else:
            unlisted += 1
            first_unlisted = first_unlisted or (p.seq or 0)

    verified_upto = lo - 1
    resynced_at = 0  # the last record whose stored hash the scan had to take on trust
    rechain_reported = False
    expect = lo
    n_checked = 0
    for seq, body, stored in store.iter_hashes(chain, lo, hi):
        at = heads.get(seq)
        if seq != expect or h is None:
            if seq != expect:
                gap = f"record {expect} is missing" if seq == expect + 1 else f"records {expect}..{seq - 1} are missing"
                note(Problem(ProblemKind.RECORD_MISSING, gap, seq=expect))
            h = stored  # nothing to chain from: trust the stored hash
            resynced_at, rechain_reported = seq, False
            compare_head = True
        else:
            c = chain_hash(h, body)
            compare_head = c == stored  # a broken record is reported once, as altered
            if compare_head:
                h = c
            else:
                prev = (
                    f"record {seq - 1}"
                    if seq - 1 > base_seq
                    else "the genesis hash"
                    if base_seq == 0
                    else f"the anchor of the purge through record {base_seq}"
                )
                note(
                    Problem(
                        ProblemKind.RECORD_ALTERED,
                        f"record {seq} does not chain from {prev}: it was modified, inserted or reordered"
                        + (f", or the hash stored for record {seq - 1} was changed" if seq - 1 > base_seq else ""),
                        seq=seq,
                    )
                )
                h = at[0].head if at is not None else stored
                resynced_at, rechain_reported = seq, False
        if at is not None:
            if compare_head:
                for cp in at:
                    if cp.head == h:
                        rechain_reported = False
                    elif not rechain_reported:
                        since = max(verified_upto + 1, resynced_at)
                        note(
                            Problem(
                                ProblemKind.RECHAINED,
                                f"records {since}..{seq} do not match the signed head of checkpoint {cp.n}: "
                                "altered, inserted, removed or reordered and re-chained without the signing key",
                                seq=since,
                                checkpoint=cp.n,
                            )
                        )
                        rechain_reported = True
            verified_upto = seq
        expect = seq + 1
        n_checked += 1
        if progress is not None and not n_checked & 0xFFFF:
            progress(0x10000)
    if progress is not None:
        progress(n_checked & 0xFFFF)
    if unlisted:
        problems.append(
            Problem(
                ProblemKind.MORE_PROBLEMS,
                f"{unlisted} more broken records from record {first_unlisted} on are not listed "
                f"(at most {MAX_RECORD_PROBLEMS} are)",
            )
        )
    return n_checked, expect


def verify_archive_records(
    rows: Iterable[tuple[int, bytes, bytes]], prev_seq: int, prev_hash: bytes
) -> tuple[int, bytes] | Problem:
    """Re-chain archived ``(seq, body, hash)`` rows from ``(prev_seq, prev_hash)``."""
    expect, h = prev_seq + 1, prev_hash
    for seq, body, stored in rows:
        if seq != expect:
            return Problem(ProblemKind.RECORD_MISSING, f"archived record {expect} is missing", seq=expect)
        h = chain_hash(h, body)
        if h != stored:
            return Problem(ProblemKind.RECORD_ALTERED, f"archived record {seq} does not match its chain hash", seq=seq)
        expect += 1
    return expect - 1, h
