"""``ChainState``: where one chain stands in the writer's memory, and how a record or a
checkpoint extends it.

The last record's sequence number and chain hash (``seq``, ``head``), the last checkpoint's
number and digest (``cp_n``, ``cp_digest``), and what waits to be written under
``log_and_continue`` (``backlog``, ``pending_lost``). Only the writer's encoder thread changes
it (``audit.writer``).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from audit.chain import GENESIS, Checkpoint, CheckpointKind, SignedCheckpoint, Signer, chain_hash
from audit.records import AuditRecord, encode_record
from audit.stores import Store, StoredRecord


@dataclass(slots=True)
class ChainState:
    chain: str
    seq: int = 0
    head: bytes = GENESIS
    cp_n: int = 0
    cp_digest: bytes = GENESIS
    needs_resync: bool = False
    """A commit failed: re-read the position from the store before the next batch."""
    pending_lost: int = 0
    backlog: collections.deque[AuditRecord] = field(default_factory=collections.deque)

    def position(self) -> tuple[int, bytes, int, bytes]:
        """``(seq, head, cp_n, cp_digest)``."""
        return self.seq, self.head, self.cp_n, self.cp_digest

    def move_to(self, position: tuple[int, bytes, int, bytes]) -> None:
        """Set ``(seq, head, cp_n, cp_digest)``."""
        self.seq, self.head, self.cp_n, self.cp_digest = position

    def resync(self, store: Store) -> None:
        """After a failed commit, re-read the chain state (a commit may have landed after all)."""
        head = store.head(self.chain)
        last = store.last_checkpoint(self.chain)
        if last is not None:
            self.cp_n, self.cp_digest = last.checkpoint.n, last.checkpoint.digest()
            self.seq, self.head = last.checkpoint.tree_size, last.checkpoint.head
        if head is not None and head[0] >= self.seq:
            self.seq, self.head = head
        self.needs_resync = False

    def append_record(self, record: AuditRecord, out: list[StoredRecord]) -> int:
        """Number, encode and hash ``record`` onto the chain; add the stored form to ``out``.

        Returns its sequence number. Raises ``AuditEncodingError`` (nothing changed then).
        """
        seq = self.seq + 1
        body = encode_record(record, self.chain, seq)
        h = chain_hash(self.head, body)
        out.append(
            StoredRecord(
                chain=self.chain,
                seq=seq,
                time_ms=record.time_ms,
                event=str(record.event),
                principal=record.principal,
                method=record.method,
                outcome=record.outcome,
                body=body,
                hash=h,
            )
        )
        self.seq, self.head = seq, h
        return seq

    def next_checkpoint(
        self,
        kind: CheckpointKind,
        extra: dict[str, Any],
        *,
        time_ms: int,
        interval_s: int,
        key_id: str,
        signer: Signer,
    ) -> SignedCheckpoint:
        """The next checkpoint over the chain as it stands, signed with ``signer``; numbered here."""
        cp = Checkpoint(
            chain=self.chain,
            n=self.cp_n + 1,
            kind=kind,
            time_ms=time_ms,
            tree_size=self.seq,
            head=self.head,
            prev=self.cp_digest,
            interval_s=interval_s,
            key_id=key_id,
            extra=extra,
        )
        signed = SignedCheckpoint.sign(cp, signer)
        self.cp_n, self.cp_digest = cp.n, cp.digest()
        return signed
