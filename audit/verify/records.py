"""Records in verification: re-chain ``h[seq] = SM3(h[seq-1] || body)`` over a range and compare
it with the stored hashes and, at each checkpoint's ``tree_size``, with the signed head; every
broken record is listed (up to :data:`MAX_RECORD_PROBLEMS` per chain). Also the re-chaining of
a retention archive's records."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from audit.chain import Checkpoint, chain_hash
from audit.stores.base import Store
from audit.verify.report import ChainReport, Problem, ProblemKind

MAX_RECORD_PROBLEMS = 100
"""At most this many broken records (altered, missing, re-chained) are listed per chain; the
scan goes on to the end and one ``more_problems`` entry counts the ones not listed."""


class _Listing:
    """Record problems added to ``problems`` up to :data:`MAX_RECORD_PROBLEMS`, the others counted."""

    __slots__ = ("first_unlisted", "listed", "problems", "unlisted")

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        self.listed = 0
        self.unlisted = 0
        self.first_unlisted = 0

    def note(self, p: Problem) -> None:
        if self.listed < MAX_RECORD_PROBLEMS:
            self.problems.append(p)
            self.listed += 1
        else:
            self.unlisted += 1
            self.first_unlisted = self.first_unlisted or (p.seq or 0)

    def close(self) -> None:
        """Add the ``more_problems`` entry for the problems not listed, if any."""
        if self.unlisted:
            self.problems.append(
                Problem(
                    ProblemKind.MORE_PROBLEMS,
                    f"{self.unlisted} more broken records from record {self.first_unlisted} on are not listed "
                    f"(at most {MAX_RECORD_PROBLEMS} are)",
                )
            )


def _altered(seq: int, base_seq: int) -> Problem:
    prev = (
        f"record {seq - 1}"
        if seq - 1 > base_seq
        else "the genesis hash"
        if base_seq == 0
        else f"the anchor of the purge through record {base_seq}"
    )
    return Problem(
        ProblemKind.RECORD_ALTERED,
        f"record {seq} does not chain from {prev}: it was modified, inserted or reordered"
        + (f", or the hash stored for record {seq - 1} was changed" if seq - 1 > base_seq else ""),
        seq=seq,
    )


@dataclass(slots=True)
class _Scan:
    """The state of one re-chaining scan (see :func:`scan_records`)."""

    heads: dict[int, list[Checkpoint]]
    """Checkpoints by the ``tree_size`` they sign."""
    base_seq: int
    listing: _Listing
    h: bytes | None
    """The chain hash of the record before ``expect``; ``None``: unknown (re-sync to the next one)."""
    expect: int
    verified_upto: int
    resynced_at: int = 0
    """The last record whose stored hash the scan had to take on trust."""
    rechain_reported: bool = False

    def step(self, seq: int, body: bytes, stored: bytes) -> None:
        at = self.heads.get(seq)
        h = self.h
        if seq != self.expect or h is None:
            if seq != self.expect:
                expect = self.expect
                gap = f"record {expect} is missing" if seq == expect + 1 else f"records {expect}..{seq - 1} are missing"
                self.listing.note(Problem(ProblemKind.RECORD_MISSING, gap, seq=expect))
            self.h = stored  # nothing to chain from: trust the stored hash
            self.resynced_at, self.rechain_reported = seq, False
            compare_head = True
        else:
            c = chain_hash(h, body)
            compare_head = c == stored  # a broken record is reported once, as altered
            if compare_head:
                self.h = c
            else:
                self.listing.note(_altered(seq, self.base_seq))
                self.h = at[0].head if at is not None else stored
                self.resynced_at, self.rechain_reported = seq, False
        if at is not None:
            if compare_head:
                self._compare_heads(seq, at)
            self.verified_upto = seq
        self.expect = seq + 1

    def _compare_heads(self, seq: int, at: list[Checkpoint]) -> None:
        for cp in at:
            if cp.head == self.h:
                self.rechain_reported = False
            elif not self.rechain_reported:
                since = max(self.verified_upto + 1, self.resynced_at)
                self.listing.note(
                    Problem(
                        ProblemKind.RECHAINED,
                        f"records {since}..{seq} do not match the signed head of checkpoint {cp.n}: "
                        "altered, inserted, removed or reordered and re-chained without the signing key",
                        seq=since,
                        checkpoint=cp.n,
                    )
                )
                self.rechain_reported = True


def scan_records(
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
    listing = _Listing(report.problems)
    scan = _Scan(heads, base_seq, listing, h, expect=lo, verified_upto=lo - 1)
    n_checked = 0
    for seq, body, stored in store.iter_hashes(chain, lo, hi):
        scan.step(seq, body, stored)
        n_checked += 1
        if progress is not None and not n_checked & 0xFFFF:
            progress(0x10000)
    if progress is not None:
        progress(n_checked & 0xFFFF)
    listing.close()
    return n_checked, scan.expect


def verify_archive_records(
    rows: Iterable[tuple[int, bytes, bytes]], prev_seq: int, prev_hash: bytes
) -> tuple[int, bytes] | Problem:
    """Re-chain archived ``(seq, body, hash)`` rows from ``(prev_seq, prev_hash)``.

    Returns ``(last seq, its chain hash)``, or the first :class:`Problem` (a missing or altered record).
    """
    expect, h = prev_seq + 1, prev_hash
    for seq, body, stored in rows:
        if seq != expect:
            return Problem(ProblemKind.RECORD_MISSING, f"archived record {expect} is missing", seq=expect)
        h = chain_hash(h, body)
        if h != stored:
            return Problem(ProblemKind.RECORD_ALTERED, f"archived record {seq} does not match its chain hash", seq=seq)
        expect += 1
    return expect - 1, h
