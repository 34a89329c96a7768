"""``verify_store``: every chain of a store, each checked for its checkpoints
(:mod:`audit.verify.checkpoints`), anchors (:mod:`audit.verify.anchors`), purges
(:mod:`audit.verify.purges`), records (:mod:`audit.verify.records`), its end (truncation) and
its unsigned tail."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from audit.anchors import AnchorSet
from audit.chain import GENESIS, Checkpoint, CheckpointKind, SignedCheckpoint, Verifier
from audit.errors import AuditRangeError, UnknownChainError
from audit.records import MAX_SAFE_INT
from audit.stores.base import Store
from audit.verify.anchors import AnchorTimes, anchor_times, check_anchors, gone_chain_report, split_anchors, with_forged
from audit.verify.checkpoints import verify_checkpoints
from audit.verify.purges import check_purges
from audit.verify.records import scan_records
from audit.verify.report import ChainReport, Problem, ProblemKind, VerifyReport, default_tolerance_ms


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
    record is listed (up to :data:`~audit.verify.records.MAX_RECORD_PROBLEMS` per chain), the first one first.

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
        return VerifyReport(with_forged(deleted, forged, chain))
    if chain is not None:
        if chain not in anchored_chains and chain not in forged:
            store.require_chain(chain)
        chains = [chain] if store.has_chain(chain) else []
    else:
        chains = store.chains()
    options = _Options(
        trusted,
        start,
        end,
        now_ms,
        anchor_set,
        tolerance_ms,
        progress,
        anchor_times(anchor_set, tsa_roots),
        archive_dir,
        archive_key,
    )
    reports = [_verify_chain(store, c, options) for c in chains]
    wanted = {chain} if chain is not None else anchored_chains
    for gone in sorted(wanted & anchored_chains - set(chains)):
        reports.append(gone_chain_report(gone, anchor_set))
    reports = with_forged(reports, forged, chain)
    beyond = [r for r in reports if r.out_of_range]
    if start is not None and beyond and len(beyond) == len(reports) and not any(r.problems for r in reports):
        raise AuditRangeError(_beyond_message(start, beyond))
    return VerifyReport(reports)


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


@dataclass(frozen=True, slots=True)
class _Options:
    """What :func:`verify_store` was asked, the same for every chain."""

    trusted: dict[str, Verifier]
    start: int | None
    end: int | None
    now_ms: int | None
    anchors: AnchorSet
    tolerance_ms: Callable[[int], int]
    progress: Callable[[int], None] | None
    times: AnchorTimes
    archive_dir: Path | None
    archive_key: bytes | None


def _records_base(cps: Sequence[Checkpoint]) -> tuple[int, bytes]:
    """Where the records begin: genesis, or the anchor of the latest signed purge."""
    base_seq, base_hash = 0, GENESIS
    for cp in cps:
        if cp.kind is CheckpointKind.PURGE:
            base_seq = int(cp.extra["purged_through"])
            base_hash = bytes.fromhex(str(cp.extra["anchor_hash"]))
    return base_seq, base_hash


def _truncated(covered: int, present_end: int) -> Problem:
    return Problem(
        ProblemKind.TRUNCATED,
        f"checkpoint covers records through {covered}, but the log ends at {present_end}",
        seq=present_end + 1,
    )


def _scan_start(
    store: Store, chain: str, report: ChainReport, start: int | None, base: tuple[int, bytes], first_present: int
) -> tuple[int, bytes | None]:
    """Where the scan starts, and the hash it chains from (``None``: unknown, the first record
    present cannot be checked against its predecessor and the scan re-syncs to its hash)."""
    base_seq, base_hash = base
    lo = base_seq + 1
    h: bytes | None = base_hash
    if start is not None and start > lo:
        lo, h = start, store.hash_at(chain, start - 1)
    if first_present > lo:
        why = " (deleted without a signed purge)" if lo == base_seq + 1 else ""
        report.problems.append(
            Problem(ProblemKind.RECORD_MISSING, f"records {lo}..{first_present - 1} are missing{why}", seq=lo)
        )
        lo, h = first_present, None
    elif h is None:
        report.problems.append(Problem(ProblemKind.RECORD_MISSING, f"record {lo - 1} is missing", seq=lo - 1))
    return lo, h


def _check_stale(report: ChainReport, last_cp: Checkpoint, covered: int, options: _Options) -> None:
    now_ms = options.now_ms
    if (
        now_ms is not None
        and last_cp.kind is not CheckpointKind.CLOSE
        and now_ms - last_cp.time_ms > options.tolerance_ms(last_cp.interval_s)
    ):
        report.problems.append(
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


def _check_signed_tail(
    store: Store,
    chain: str,
    report: ChainReport,
    last_cp: Checkpoint,
    covered: int,
    last_present: int,
    options: _Options,
) -> None:
    """The records after the last checkpoint: none after a close, none older than the tolerance."""
    problems = report.problems
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
            if last_rec is not None and last_rec.time_ms - last_cp.time_ms > options.tolerance_ms(last_cp.interval_s):
                problems.append(
                    Problem(
                        ProblemKind.TAIL_UNSIGNED,
                        f"records {covered + 1}..{last_present} span beyond the checkpoint interval "
                        "without a checkpoint: checkpoints were removed",
                        seq=covered + 1,
                    )
                )
    _check_stale(report, last_cp, covered, options)


def _check_never_signed(
    store: Store, chain: str, report: ChainReport, lo: int, last_present: int, options: _Options
) -> None:
    """Records and no checkpoint at all: only within the first interval of a writer."""
    report.unsigned_tail = last_present - lo + 1
    first = next(iter(store.records(chain, lo, lo)), None)
    last_rec = next(iter(store.records(chain, last_present, last_present)), None)
    tolerance = options.tolerance_ms(60)
    if first is not None and last_rec is not None and last_rec.time_ms - first.time_ms > tolerance:
        report.problems.append(Problem(ProblemKind.NO_CHECKPOINT, "no signed checkpoint covers these records", seq=lo))
    elif options.now_ms is not None and first is not None and options.now_ms - first.time_ms > tolerance:
        report.problems.append(Problem(ProblemKind.NO_CHECKPOINT, "no signed checkpoint covers these records", seq=lo))


def _check_end(
    report: ChainReport, cps: Sequence[Checkpoint], end: int | None, covered: int, last_present: int, hi: int
) -> None:
    """Signed checkpoints within the requested range that reach beyond what is left."""
    limit = end if end is not None else covered
    covered_here = max((cp.tree_size for cp in cps if cp.tree_size <= limit), default=0)
    if covered_here > last_present:
        report.problems.append(_truncated(covered_here, last_present))
    elif last_present < hi:
        report.problems.append(
            Problem(ProblemKind.RECORD_MISSING, f"record {last_present + 1} is missing", seq=last_present + 1)
        )


def _verify_chain(store: Store, chain: str, options: _Options) -> ChainReport:
    report = ChainReport(chain)
    problems = report.problems
    trusted, start, end = options.trusted, options.start, options.end
    cps = verify_checkpoints(store, chain, trusted, report, options.tolerance_ms)
    if options.anchors:
        check_anchors(store, chain, trusted, options.anchors, cps, report, options.times, options.tolerance_ms)
    check_purges(chain, options.anchors, cps, report, options.times, options.archive_dir, options.archive_key, trusted)
    last_cp = cps[-1] if cps else None
    if last_cp is not None:
        report.last_checkpoint = last_cp.n
        report.last_checkpoint_time_ms = last_cp.time_ms
        report.closed = last_cp.kind is CheckpointKind.CLOSE

    base_seq, base_hash = _records_base(cps)
    bounds = store.bounds(chain)
    report.last_record = bounds[1] if bounds is not None else None
    covered = max((cp.tree_size for cp in cps), default=0)
    # The last record that should be here: the last one stored, or the last one purged.
    present_end = bounds[1] if bounds is not None else base_seq
    if start is not None and start > max(present_end, base_seq):
        if covered > present_end and covered >= start:
            problems.append(_truncated(covered, present_end))
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

    lo, h = _scan_start(store, chain, report, start, (base_seq, base_hash), bounds[0])
    hi = min(end, bounds[1]) if end is not None else bounds[1]
    n_checked, expect = scan_records(store, chain, cps, lo, hi, h, base_seq, report, options.progress)
    report.records_checked = n_checked
    report.first_seq = lo
    report.last_seq = expect - 1
    last_present = expect - 1
    _check_end(report, cps, end, covered, last_present, hi)
    mismatch = store.column_mismatches(chain, lo, hi)
    if mismatch is not None:
        problems.append(
            Problem(
                ProblemKind.RECORD_ALTERED, f"indexed columns of record {mismatch} disagree with its body", seq=mismatch
            )
        )
    if end is None and last_cp is not None:
        _check_signed_tail(store, chain, report, last_cp, covered, last_present, options)
    elif end is None and last_cp is None:
        _check_never_signed(store, chain, report, lo, last_present, options)
    return report
