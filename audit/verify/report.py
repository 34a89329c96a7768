"""The result of ``verify``: what kind of problem was found (:class:`ProblemKind`), each
:class:`Problem`, one :class:`ChainReport` per chain, the :class:`VerifyReport` of a store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trust.compat import StrEnum

DAY_MS = 86_400_000


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
