"""The group-commit writer of ``AuditLog``: its state, and the pipeline that numbers, encodes,
hashes, signs and commits batches.

``append`` puts a record on a queue; one writer task takes everything queued (up to
``max_batch``); an encoder thread assigns sequence numbers, encodes, hashes and signs batch
k+1 while a committer thread writes and fsyncs batch k in one transaction — group commit. A
failed write is undone (chain state restored) and handled by the failure policy.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from audit import metrics
from audit.chain import GENESIS, Checkpoint, CheckpointKind, SignedCheckpoint, Signer, chain_hash
from audit.config import AuditSettings, FailurePolicy
from audit.errors import AuditEncodingError, AuditStoreError, AuditStoreReplaced, AuditUnavailable, WriterConflict
from audit.records import AuditRecord, EventType, encode_record, now_ms
from audit.stores import Store, StoredRecord
from audit.syslog_shipper import SyslogShipper

log = structlog.get_logger("xinserve.audit")


UNAVAILABLE_MESSAGE = "the audit log cannot record this call (audit store unavailable); refusing it"


@dataclass(slots=True)
class _Item:
    kind: str  # "rec" | "cp" | "call"
    payload: Any
    future: asyncio.Future[Any]


@dataclass(slots=True)
class _Prepared:
    """A batch encoded and hashed on the encoder thread, ready to be written."""

    batch: list[_Item]
    records: list[StoredRecord]
    checkpoints: list[SignedCheckpoint]
    results: list[Any]
    saved: tuple[int, bytes, int, bytes]
    """Chain state before this batch (restored if its write fails)."""
    backlog: list[AuditRecord]
    lost: int


@dataclass(slots=True)
class _ChainState:
    seq: int = 0
    head: bytes = GENESIS
    cp_n: int = 0
    cp_digest: bytes = GENESIS
    needs_resync: bool = False
    pending_lost: int = 0
    backlog: collections.deque[AuditRecord] = field(default_factory=collections.deque)


@dataclass(frozen=True, slots=True)
class RecoveryInfo:
    """What :meth:`AuditLog.open` found: a clean previous close, or a crash it recovered from."""

    unclean_shutdown: bool
    previous_checkpoint: int | None
    unsigned_tail: int
    """Records after the previous checkpoint, now covered by the recovery checkpoint."""
    last_seq: int


class LogCore:
    """State shared by the parts of ``AuditLog``, and its group-commit writer."""

    def __init__(
        self,
        store_factory: Callable[[], Store],
        *,
        chain: str,
        signer: Signer,
        key_id: str,
        checkpoint_interval_s: float = 60,
        failure_policy: FailurePolicy = FailurePolicy.FAIL_CLOSED,
        backlog_limit: int = 100_000,
        retry_interval_s: float = 2.0,
        max_batch: int = 4096,
        clock: Callable[[], int] = now_ms,
        settings: AuditSettings | None = None,
    ) -> None:
        self._store_factory = store_factory
        self.chain = chain
        self._signer = signer
        self.key_id = key_id
        self.checkpoint_interval_s = checkpoint_interval_s
        self.failure_policy = failure_policy
        self._backlog_limit = backlog_limit
        self._retry_interval_s = retry_interval_s
        self._max_batch = max_batch
        self._clock = clock
        self.settings = settings
        # Two single threads form a pipeline: the encoder assigns sequence numbers, encodes,
        # hashes and signs batch k+1 while the committer writes and fsyncs batch k.
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="audit-encoder")
        self._commit_executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="audit-committer"
        )
        self._store: Store | None = None
        self._state = _ChainState()
        self._pending: collections.deque[_Item | None] = collections.deque()
        self._wake = asyncio.Event()
        self._writer_task: asyncio.Task[None] | None = None
        self._ticker_task: asyncio.Task[None] | None = None
        self._healthy = True
        self._closed = False
        self._closing = False
        """Set when ``close`` starts: the log's own events are no longer appended (they would
        follow the closing checkpoint)."""
        self.last_error: str | None = None
        self.recovery: RecoveryInfo | None = None
        self.disk_warning: str | None = None
        self._last_checkpoint: SignedCheckpoint | None = None
        self._last_cp_monotonic = time.monotonic()
        self._verifier: Any = None
        self._shipper: SyslogShipper | None = None
        self._ship_records = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    async def _submit(self, kind: str, payload: Any) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append(_Item(kind, payload, fut))
        self._wake.set()
        return await fut

    def _shipping_blocked(self) -> bool:
        return self._shipper is not None and self.failure_policy is FailurePolicy.FAIL_CLOSED and self._shipper.full

    async def append(self, record: AuditRecord, *, _internal: bool = False) -> int | None:
        """Append ``record``; return its sequence number once it is durably stored.

        ``fail_closed``: raises :class:`AuditUnavailable` if it cannot be stored, or while the
        anchor buffer of an unreachable syslog collector is full.
        ``log_and_continue``: returns ``None`` instead (the record waits in a bounded backlog).
        Raises :class:`AuditEncodingError` for a record that cannot be encoded.
        """
        if self._closed:
            raise AuditUnavailable("the audit log is closed")
        if not _internal and self._shipping_blocked():
            raise AuditUnavailable(UNAVAILABLE_MESSAGE)
        fut: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Item("rec", record, fut))
        self._wake.set()
        return await fut

    async def run_in_writer(self, fn: Callable[[Store, LogCore], Any]) -> Any:
        """Run ``fn(store, log)`` on the writer thread between batches (retention uses this)."""
        return await self._submit("call", fn)

    async def _writer(self) -> None:
        loop = asyncio.get_running_loop()
        pending = self._pending
        inflight: tuple[_Prepared, asyncio.Future[None]] | None = None

        async def finish(successor: _Prepared | None = None) -> bool:
            """Wait for the batch being written; resolve it. False if the write failed.

            ``successor`` is a batch already numbered on top of it: on failure it is undone
            first (newest first), so the chain state returns to before the failed batch.
            """
            nonlocal inflight
            assert inflight is not None
            prepared, fut = inflight
            inflight = None
            try:
                await fut
            except Exception as raw:  # the writer task must survive anything the store does
                exc = _as_store_error(raw)
                if successor is not None:
                    self._rollback(successor)
                self._rollback(prepared)
                self._on_failure(exc, prepared.batch)
                return False
            self._committed(prepared)
            self._on_success(prepared.batch, prepared.results)
            return True

        while True:
            if not pending:
                if inflight is not None:
                    await finish()
                    continue
                self._wake.clear()
                await self._wake.wait()
                continue
            item = pending[0]
            if item is None or item.kind == "call":
                if inflight is not None:
                    await finish()
                    continue
                pending.popleft()
                if item is None:
                    return
                try:
                    result = await loop.run_in_executor(self._executor, self._call_sync, item.payload)
                except asyncio.CancelledError:  # the writer task is stopping: so is the caller's wait
                    if not item.future.done():
                        item.future.cancel()
                    raise
                except BaseException as exc:  # delivered to the caller
                    if not item.future.done():
                        item.future.set_exception(exc)
                else:
                    if not item.future.done():
                        item.future.set_result(result)
                continue
            batch: list[_Item] = []
            while pending and len(batch) < self._max_batch:
                nxt = pending[0]
                if nxt is None or nxt.kind == "call":
                    break
                batch.append(nxt)
                pending.popleft()
            if inflight is not None and self._state.needs_resync:
                await finish()  # never encode on top of a batch whose write may fail
            try:
                prepared = await loop.run_in_executor(self._executor, self._prepare_sync, batch)
            except Exception as raw:  # reopening or resyncing the store failed (or a bug)
                if inflight is not None:
                    await finish()
                self._on_failure(_as_store_error(raw), batch)
                continue
            if inflight is not None and not await finish(prepared):
                # The previous write failed and this batch, numbered on top of it, was undone:
                # put it back to be retried (and handled by the failure policy) next.
                pending.extendleft(reversed(batch))
                continue
            fut = loop.run_in_executor(self._commit_executor, self._write_sync, prepared)
            inflight = (prepared, fut)

    def _call_sync(self, fn: Callable[[Store, LogCore], Any]) -> Any:
        if self._store is None:
            self._store = self._store_factory()
            self._store.lock_writer(self.chain)
        return fn(self._store, self)

    def _resync(self, store: Store) -> None:
        """After a failed commit, re-read the chain state (a commit may have landed after all)."""
        st = self._state
        head = store.head(self.chain)
        last = store.last_checkpoint(self.chain)
        if last is not None:
            st.cp_n, st.cp_digest = last.checkpoint.n, last.checkpoint.digest()
            st.seq, st.head = last.checkpoint.tree_size, last.checkpoint.head
        if head is not None and head[0] >= st.seq:
            st.seq, st.head = head
        st.needs_resync = False

    def _prepare_sync(self, batch: list[_Item]) -> _Prepared:
        """Encoder thread: number, encode, hash and sign a batch (and any backlog) in memory."""
        st = self._state
        if self._store is None:
            try:
                store = self._store_factory()
                store.lock_writer(self.chain)
            except WriterConflict as exc:
                raise AuditStoreError(str(exc)) from None
            self._store = store
        if st.needs_resync:
            self._resync(self._store)
        saved = (st.seq, st.head, st.cp_n, st.cp_digest)
        records: list[StoredRecord] = []
        checkpoints: list[SignedCheckpoint] = []
        results: list[Any] = []
        lost, st.pending_lost = st.pending_lost, 0
        backlog = list(st.backlog)
        st.backlog.clear()
        try:
            if lost:
                self._encode_into(
                    AuditRecord(
                        event=EventType.AUDIT_RECORDS_LOST,
                        outcome="DATA_LOSS",
                        time_ms=self._clock(),
                        detail={"count": lost},
                    ),
                    records,
                )
            for rec in backlog:
                with contextlib.suppress(AuditEncodingError):
                    self._encode_into(rec, records)
            for item in batch:
                if item.kind == "rec":
                    try:
                        results.append(self._encode_into(item.payload, records))
                    except AuditEncodingError as exc:
                        results.append(exc)
                else:
                    kind, extra = item.payload
                    cp = self._make_checkpoint(kind, extra)
                    checkpoints.append(cp)
                    results.append(cp)
        except BaseException:
            st.seq, st.head, st.cp_n, st.cp_digest = saved
            st.pending_lost += lost
            st.backlog.extendleft(reversed(backlog))
            raise
        return _Prepared(batch, records, checkpoints, results, saved, backlog, lost)

    def _write_sync(self, prepared: _Prepared) -> None:
        """Committer thread: one durable transaction for the whole batch."""
        store = self._store
        if store is None:
            raise AuditStoreError("the audit store is closed")
        t0 = time.perf_counter()
        store.check_identity()
        store.write(prepared.records, prepared.checkpoints)
        metrics.COMMIT_SECONDS.observe(time.perf_counter() - t0)

    def _committed(self, prepared: _Prepared) -> None:
        metrics.RECORDS.inc(len(prepared.records))
        if self._ship_records and self._shipper is not None:
            for r in prepared.records:
                self._shipper.offer_record(r.chain, r.seq, r.time_ms, r.hash, r.body)
        for cp in prepared.checkpoints:
            self._after_checkpoint(cp)

    def _rollback(self, prepared: _Prepared) -> None:
        """Undo a prepared batch that was not written (called with no encoding in progress)."""
        st = self._state
        st.seq, st.head, st.cp_n, st.cp_digest = prepared.saved
        st.needs_resync = True
        st.pending_lost += prepared.lost
        st.backlog.extendleft(reversed(prepared.backlog))

    def _encode_into(self, record: AuditRecord, out: list[StoredRecord]) -> int:
        st = self._state
        seq = st.seq + 1
        body = encode_record(record, self.chain, seq)
        h = chain_hash(st.head, body)
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
        st.seq, st.head = seq, h
        return seq

    def _make_checkpoint(self, kind: CheckpointKind, extra: dict[str, Any]) -> SignedCheckpoint:
        st = self._state
        cp = Checkpoint(
            chain=self.chain,
            n=st.cp_n + 1,
            kind=kind,
            time_ms=self._clock(),
            tree_size=st.seq,
            head=st.head,
            prev=st.cp_digest,
            interval_s=int(self.checkpoint_interval_s),
            key_id=self.key_id,
            extra=extra,
        )
        signed = SignedCheckpoint.sign(cp, self._signer)
        st.cp_n, st.cp_digest = cp.n, cp.digest()
        return signed

    def _after_checkpoint(self, cp: SignedCheckpoint) -> None:
        self._last_checkpoint = cp
        self._last_cp_monotonic = time.monotonic()
        metrics.CHECKPOINTS.inc()
        shipper, loop = self._shipper, self._loop
        if shipper is not None and loop is not None:
            if threading.get_ident() == self._loop_thread:
                shipper.offer_checkpoint(cp)
            else:
                loop.call_soon_threadsafe(shipper.offer_checkpoint, cp)

    def _on_success(self, batch: list[_Item], results: list[Any]) -> None:
        if not self._healthy:
            log.warning("audit_store_recovered", chain=self.chain)
        self._healthy = True
        self.last_error = None
        metrics.HEALTHY.set(1)
        for item, result in zip(batch, results, strict=True):
            if item.future.done():
                continue
            if isinstance(result, BaseException):
                item.future.set_exception(result)
            else:
                item.future.set_result(result)

    def _on_failure(self, exc: AuditStoreError, batch: list[_Item]) -> None:
        if self._healthy:
            log.error("audit_store_failed", chain=self.chain, error=str(exc), policy=str(self.failure_policy))
            if isinstance(exc, AuditStoreReplaced):
                self._alert_store_replaced(exc)
        self._healthy = False
        self.last_error = str(exc)
        metrics.HEALTHY.set(0)
        st = self._state
        n_rec = sum(1 for i in batch if i.kind == "rec")
        metrics.APPEND_FAILURES.inc(n_rec)
        for item in batch:
            if item.future.done():
                continue
            if item.kind == "rec" and self.failure_policy is FailurePolicy.LOG_AND_CONTINUE:
                if len(st.backlog) < self._backlog_limit:
                    st.backlog.append(item.payload)
                else:
                    st.pending_lost += 1
                    metrics.RECORDS_LOST.inc()
                item.future.set_result(None)
            else:
                item.future.set_exception(AuditUnavailable(UNAVAILABLE_MESSAGE))
        if self.failure_policy is FailurePolicy.LOG_AND_CONTINUE:
            log.warning("audit_records_backlogged", chain=self.chain, backlog=len(st.backlog), lost=st.pending_lost)

    def _alert_store_replaced(self, exc: AuditStoreReplaced) -> None:
        """The log itself cannot take this record: log it and send it down the anchor stream."""
        log.critical(str(EventType.AUDIT_STORE_REPLACED), chain=self.chain, error=str(exc), seq=self._state.seq)
        if self._shipper is not None:
            self._shipper.offer_alert(
                str(EventType.AUDIT_STORE_REPLACED),
                {"chain": self.chain, "seq": self._state.seq, "reason": str(exc)},
                self._clock(),
            )

    def _close_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def _as_store_error(exc: Exception) -> AuditStoreError:
    if isinstance(exc, AuditStoreError):
        return exc
    log.error("audit_writer_internal_error", error_type=type(exc).__name__, exc_info=exc)
    return AuditStoreError(f"internal error in the audit writer ({type(exc).__name__})")
