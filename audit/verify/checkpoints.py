"""Checkpoints in verification: each stored checkpoint must have a canonical payload, be where
its number says, have indexed columns equal to its payload and an SM2 signature by a trusted
key; the signed ones must be numbered without gaps, link to their predecessor, never go back
in time or size, follow each other within the tolerance while the writer runs, and after a
close only an ``open`` or ``recovery`` checkpoint may follow (covering no new record)."""

from __future__ import annotations

from collections.abc import Callable

from audit.chain import Checkpoint, CheckpointKind, Verifier
from audit.errors import AuditEncodingError
from audit.stores.base import Store
from audit.verify.purges import purge_ok
from audit.verify.report import ChainReport, Problem, ProblemKind
from trust.errors import InvalidSignature


def _trusted(
    cp: Checkpoint,
    n: int,
    chain: str,
    payload: bytes,
    signature: bytes,
    columns: dict[int, tuple[str, int, int]],
    trusted: dict[str, Verifier],
    problems: list[Problem],
) -> bool:
    """Whether checkpoint ``cp`` (stored as ``n``) is in its place and signed by a trusted key;
    adds what is wrong with it to ``problems``."""
    if cp.n != n or cp.chain != chain:
        problems.append(
            Problem(ProblemKind.CHECKPOINT_MISPLACED, f"checkpoint stored as n={n} says n={cp.n}", checkpoint=n)
        )
        return False
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
            Problem(ProblemKind.CHECKPOINT_UNTRUSTED_KEY, f"checkpoint {n} is signed by an untrusted key", checkpoint=n)
        )
        return False
    try:
        key.verify(signature, payload)
    except InvalidSignature:
        problems.append(
            Problem(ProblemKind.CHECKPOINT_BAD_SIGNATURE, f"checkpoint {n}: invalid signature", checkpoint=n)
        )
        return False
    return True


def _after_close(prev: Checkpoint, cp: Checkpoint, problems: list[Problem]) -> None:
    n = cp.n
    if cp.kind not in (CheckpointKind.OPEN, CheckpointKind.RECOVERY):
        problems.append(Problem(ProblemKind.CHECKPOINT_AFTER_CLOSE, f"checkpoint {n} follows a close", checkpoint=n))
    elif cp.tree_size != prev.tree_size:
        problems.append(
            Problem(
                ProblemKind.RECORDS_AFTER_CLOSE,
                f"records {prev.tree_size + 1}..{cp.tree_size} were added after the closing checkpoint {prev.n}",
                seq=prev.tree_size + 1,
                checkpoint=n,
            )
        )


def _check_link(prev: Checkpoint, cp: Checkpoint, report: ChainReport, tolerance_ms: Callable[[int], int]) -> None:
    """Checks between two consecutive signed checkpoints ``prev`` and ``cp``."""
    problems = report.problems
    n = cp.n
    if cp.prev != prev.digest():
        problems.append(
            Problem(ProblemKind.CHECKPOINT_CHAIN_BROKEN, f"checkpoint {n} does not link to {prev.n}", checkpoint=n)
        )
    if cp.time_ms < prev.time_ms or cp.tree_size < prev.tree_size:
        problems.append(
            Problem(ProblemKind.CHECKPOINT_REGRESSED, f"checkpoint {n} goes back in time or size", checkpoint=n)
        )
    if prev.kind is CheckpointKind.CLOSE:
        _after_close(prev, cp, problems)
    elif cp.time_ms - prev.time_ms > tolerance_ms(prev.interval_s) and cp.kind is CheckpointKind.RECOVERY:
        # The writer was down (crashed, restarted later): the signed recovery checkpoint
        # follows the previous one directly and seals what was written before the crash.
        report.recoveries.append(
            f"checkpoint {n}: the writer was down for {(cp.time_ms - prev.time_ms) // 1000} s after checkpoint {prev.n}"
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


def verify_checkpoints(
    store: Store,
    chain: str,
    trusted: dict[str, Verifier],
    report: ChainReport,
    tolerance_ms: Callable[[int], int],
) -> list[Checkpoint]:
    """Check the checkpoints of ``chain`` (module docstring) into ``report``; return the good
    ones (signed by a trusted key, in their place, a purge only if it is well formed), in order."""
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
        if not _trusted(cp, n, chain, payload, signature, columns, trusted, problems):
            continue
        if n != expect_n:
            problems.append(
                Problem(
                    ProblemKind.CHECKPOINT_MISSING, f"checkpoints {expect_n}..{n - 1} are missing", checkpoint=expect_n
                )
            )
        if prev is not None and n == prev.n + 1:
            _check_link(prev, cp, report, tolerance_ms)
        if cp.kind is CheckpointKind.RECOVERY:
            report.recoveries.append(
                f"checkpoint {n}: writer restarted after an unclean shutdown; "
                f"{cp.extra.get('unsigned_tail', 0)} unsigned records were intact and are now sealed"
            )
        if cp.kind is CheckpointKind.PURGE and not purge_ok(cp, report):
            continue
        prev = cp
        expect_n = n + 1
        good.append(cp)
    return good
