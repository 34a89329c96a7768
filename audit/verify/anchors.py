"""Anchors in verification: checkpoints and records an auditor kept off the host
(:class:`~audit.anchors.AnchorSet`), checked against what the store still holds.

A checkpoint anchor must be signed by a trusted key (else it is a finding, never evidence), be
in the log byte for byte and, with TSA roots, carry a time-stamp token that verifies and shows
the checkpoint's time is not forged; a record anchor must still be in the log with the hash that
was shipped. A chain that anchors name but the store no longer holds was deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from audit.anchors import AnchorSet
from audit.chain import Checkpoint, CheckpointKind, SignedCheckpoint, Verifier
from audit.stores.base import Store
from audit.timestamping import TimestampError, verify_timestamp
from audit.verify.report import ChainReport, Problem, ProblemKind, VerifyReport
from trust.errors import InvalidSignature


def _signature_problem(a: SignedCheckpoint, trusted: dict[str, Verifier]) -> Problem | None:
    """``anchor_untrusted`` / ``anchor_bad_signature`` for anchor ``a``, ``None`` if its signature verifies."""
    c = a.checkpoint
    key = trusted.get(c.key_id)
    if key is None:
        return Problem(ProblemKind.ANCHOR_UNTRUSTED, f"anchor {c.n} is not signed by a trusted key", checkpoint=c.n)
    try:
        key.verify(a.signature, a.payload)
    except InvalidSignature:
        return Problem(ProblemKind.ANCHOR_BAD_SIGNATURE, f"anchor {c.n} has an invalid signature", checkpoint=c.n)
    return None


def split_anchors(anchors: AnchorSet, trusted: dict[str, Verifier]) -> tuple[AnchorSet, dict[str, list[Problem]]]:
    """``anchors`` less the checkpoints not signed by a trusted key or whose signature fails,
    and those as problems (``anchor_untrusted``, ``anchor_bad_signature``) by the chain they claim.

    The claims of an anchor (its chain, its number, what it covers) are only read once its
    SM2 signature verified: a forged one is reported as such, never as a deleted chain.
    """
    kept = AnchorSet(
        timestamps=dict(anchors.timestamps), records=dict(anchors.records), conflicts=dict(anchors.conflicts)
    )
    forged: dict[str, list[Problem]] = {}
    for a in anchors.checkpoints:
        problem = _signature_problem(a, trusted)
        if problem is None:
            kept.checkpoints.append(a)
        else:
            forged.setdefault(a.checkpoint.chain, []).append(problem)
    return kept, forged


def with_forged(reports: list[ChainReport], forged: dict[str, list[Problem]], chain: str | None) -> list[ChainReport]:
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
    return VerifyReport(with_forged(reports, forged, None))


@dataclass(slots=True)
class AnchorTimes:
    """Verified RFC 3161 ``genTime`` (ms) per checkpoint payload, and tokens that failed."""

    checked: bool
    gen_ms: dict[bytes, int] = field(default_factory=dict)
    invalid: dict[bytes, str] = field(default_factory=dict)


def anchor_times(anchors: AnchorSet, roots: Sequence[Any] | None) -> AnchorTimes:
    """The time-stamp tokens of ``anchors`` verified against the TSA ``roots`` (unchecked without roots)."""
    if roots is None:
        return AnchorTimes(checked=False)
    out = AnchorTimes(checked=True)
    for payload, token in anchors.timestamps.items():
        try:
            out.gen_ms[payload] = verify_timestamp(token, payload, roots)
        except TimestampError as exc:
            out.invalid[payload] = str(exc)
    return out


def _check_timestamp(
    a: SignedCheckpoint, times: AnchorTimes, tolerance_ms: Callable[[int], int], problems: list[Problem]
) -> None:
    c = a.checkpoint
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


def _check_record_anchors(
    store: Store, chain: str, anchors: AnchorSet, cps: Sequence[Checkpoint], problems: list[Problem]
) -> None:
    base_seq = max((int(cp.extra["purged_through"]) for cp in cps if cp.kind is CheckpointKind.PURGE), default=0)
    shipped = sorted((seq, h) for (c, seq), h in anchors.records.items() if c == chain and seq > base_seq)
    if not shipped:
        return
    stored = {seq: h for seq, _, h in store.iter_hashes(chain, shipped[0][0], shipped[-1][0])}
    missing = [seq for seq, _ in shipped if seq not in stored]
    altered = [seq for seq, h in shipped if seq in stored and (stored[seq] != h or (chain, seq) in anchors.conflicts)]
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


def check_anchors(
    store: Store,
    chain: str,
    trusted: dict[str, Verifier],
    anchors: AnchorSet,
    cps: Sequence[Checkpoint],
    report: ChainReport,
    times: AnchorTimes,
    tolerance_ms: Callable[[int], int],
) -> None:
    """Add to ``report`` what the anchors of ``chain`` show: checkpoints and records no longer
    in the log (or altered), invalid time-stamps, checkpoint times later than the TSA saw them.
    Records removed by a signed purge (before its ``purged_through``) are not looked for."""
    problems = report.problems
    raw_by_n = {n: p for n, p, _ in store.raw_checkpoints(chain)}
    for a in (a for a in anchors.checkpoints if a.checkpoint.chain == chain):
        c = a.checkpoint
        problem = _signature_problem(a, trusted)
        if problem is not None:
            problems.append(problem)
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
            _check_timestamp(a, times, tolerance_ms, problems)
    _check_record_anchors(store, chain, anchors, cps, problems)
