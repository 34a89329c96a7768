"""The storage interface shared by the SQLite and PostgreSQL backends.

A store is synchronous and used by one thread at a time: the log runs its writer store on
one dedicated thread; verification, queries and the CLI open their own store instances.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from audit.chain import Checkpoint, SignedCheckpoint


class StoredRecord(NamedTuple):
    """A row of the records table. ``body`` is the canonical encoding, ``hash`` its chain hash.

    ``time_ms``, ``event``, ``principal``, ``method`` and ``outcome`` are copies of body
    fields kept for indexed queries; verification checks they agree with the body. A tuple
    in column order, so the stores insert it without copying.
    """

    chain: str
    seq: int
    time_ms: int
    event: str
    principal: str | None
    method: str | None
    outcome: str
    body: bytes
    hash: bytes


@dataclass(frozen=True, slots=True)
class QueryFilter:
    chain: str | None = None
    since_ms: int | None = None
    """Inclusive lower bound on ``time_ms``."""
    until_ms: int | None = None
    """Exclusive upper bound on ``time_ms``."""
    principal: str | None = None
    """Exactly this principal."""
    principal_any: tuple[str, ...] | None = None
    """Any of these principals, exactly (``audit.principals.principal_candidates`` of what
    an auditor typed); with ``principal`` both apply."""
    method: str | None = None
    outcome: str | None = None
    event: str | None = None
    after_seq: int | None = None
    """Only with ``chain``: records with a larger sequence number (paging, ``tail -f``)."""
    limit: int | None = None
    descending: bool = False


class Store(abc.ABC):
    """One connection to an audit store."""

    kind: str = "?"
    expected_columns: ClassVar[dict[str, dict[str, str]]] = {}
    """Per table, each column's declared type as the backend's catalog names it."""

    @abc.abstractmethod
    def table_columns(self, table: str) -> dict[str, str] | None:
        """``{column: declared type}`` of ``table`` as the catalog has it, ``None`` if it does not exist."""

    def schema_problems(self) -> list[str]:
        """How the tables differ from the schema this code creates (dropped, rebuilt with other
        columns or types); empty when they match. Raises ``AuditStoreError``."""
        problems: list[str] = []
        for table, expected in self.expected_columns.items():
            cols = self.table_columns(table)
            if cols is None:
                problems.append(f"table {table} is missing (dropped)")
            elif cols != expected:
                changed = sorted(
                    f"{c} {cols.get(c, 'missing')}" for c in set(expected) | set(cols) if cols.get(c) != expected.get(c)
                )
                problems.append(f"table {table} was rebuilt with other columns or types ({', '.join(changed)})")
        return problems

    def schema_exists(self) -> bool:
        """Whether any of the audit tables exists (a fresh store has none)."""
        return any(self.table_columns(t) is not None for t in self.expected_columns)

    @abc.abstractmethod
    def create_schema(self) -> None:
        """Create the tables and indexes if missing (idempotent)."""

    @abc.abstractmethod
    def lock_writer(self, chain: str) -> None:
        """Become the only writer of ``chain`` for this connection's lifetime, else ``WriterConflict``."""

    @abc.abstractmethod
    def head(self, chain: str) -> tuple[int, bytes] | None:
        """``(seq, hash)`` of the chain's last record, or ``None`` if it has none."""

    @abc.abstractmethod
    def last_checkpoint(self, chain: str) -> SignedCheckpoint | None: ...

    @abc.abstractmethod
    def write(self, records: Sequence[StoredRecord], checkpoints: Sequence[SignedCheckpoint]) -> None:
        """Insert records then checkpoints in one durable transaction (fsync'd before returning)."""

    @abc.abstractmethod
    def purge(self, chain: str, through_seq: int, checkpoint: SignedCheckpoint) -> int:
        """In one transaction: insert the purge checkpoint, delete records ``seq <= through_seq``."""

    @abc.abstractmethod
    def iter_hashes(self, chain: str, start: int, end: int | None) -> Iterator[tuple[int, bytes, bytes]]:
        """``(seq, body, hash)`` for ``start <= seq <= end`` in sequence order (fast path for verify)."""

    @abc.abstractmethod
    def column_mismatches(self, chain: str, start: int, end: int | None) -> int | None:
        """The first ``seq`` in range whose indexed columns disagree with its body, if any."""

    def _column_mismatches_slow(self, chain: str, start: int, end: int) -> int | None:
        """Row-by-row fallback of :meth:`column_mismatches` (used when a body is not JSON)."""
        from audit.errors import AuditEncodingError
        from audit.records import parse_body

        for r in self.records(chain, start, end):
            try:
                obj = parse_body(r.body)
            except AuditEncodingError:
                return r.seq
            body_cols = tuple(
                obj.get(k) for k in ("chain", "seq", "time_ms", "event", "principal", "method", "outcome")
            )
            if body_cols != (r.chain, r.seq, r.time_ms, r.event, r.principal, r.method, r.outcome):
                return r.seq
        return None

    @abc.abstractmethod
    def raw_checkpoints(self, chain: str) -> list[tuple[int, bytes, bytes]]:
        """``(n, payload, signature)`` of every checkpoint of ``chain`` in ``n`` order, unparsed."""

    @abc.abstractmethod
    def checkpoint_columns(self, chain: str) -> list[tuple[int, str, int, int]]:
        """``(n, kind, time_ms, tree_size)`` as the checkpoint rows' own columns hold them (in ``n``
        order); verification checks they agree with the signed payloads."""

    def checkpoints(self, chain: str) -> list[SignedCheckpoint]:
        """All checkpoints of ``chain`` in ``n`` order (raises ``AuditEncodingError`` on a malformed one)."""
        return [SignedCheckpoint(Checkpoint.from_payload(p), p, s) for _, p, s in self.raw_checkpoints(chain)]

    @abc.abstractmethod
    def chains(self) -> list[str]:
        """Every chain id that has records or checkpoints."""

    def has_chain(self, chain: str) -> bool:
        """Whether the store holds any record or checkpoint of ``chain``."""
        return self.bounds(chain) is not None or bool(self.raw_checkpoints(chain))

    def require_chain(self, chain: str) -> None:
        """Raise ``UnknownChainError`` (listing the chains there are) unless :meth:`has_chain`."""
        if not self.has_chain(chain):
            from audit.errors import UnknownChainError

            raise UnknownChainError(chain, self.chains())

    @abc.abstractmethod
    def bounds(self, chain: str) -> tuple[int, int] | None:
        """``(first seq, last seq)`` of the records present, or ``None``."""

    @abc.abstractmethod
    def hash_at(self, chain: str, seq: int) -> bytes | None: ...

    @abc.abstractmethod
    def records(self, chain: str, start: int, end: int) -> Iterator[StoredRecord]:
        """Records ``start <= seq <= end`` in sequence order."""

    @abc.abstractmethod
    def first_seq_at_or_after(self, chain: str, time_ms: int) -> int | None:
        """The smallest ``seq`` whose ``time_ms >= time_ms`` (retention's cut point)."""

    @abc.abstractmethod
    def query(self, flt: QueryFilter) -> Iterator[StoredRecord]: ...

    def check_identity(self) -> None:
        """Raise ``AuditStoreReplaced`` when the store this connection writes to is no longer the
        one it opened (the SQLite file deleted or replaced); a server store has nothing to check."""
        return None

    def usage_path(self) -> str | None:
        """A filesystem path whose disk usage the watermark should watch (``None``: not local)."""
        return None

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
