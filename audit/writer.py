"""``ChainWriter``: the group-commit writer of one chain (``AuditLog``'s write side): its chain
state, and the pipeline that numbers, encodes, hashes, signs and commits batches.

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
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from audit import metrics
from audit.chain import CheckpointKind, SignedCheckpoint, Signer
from audit.chain_state import ChainState
from audit.config import FailurePolicy
from audit.errors import AuditEncodingError, AuditStoreError, AuditStoreReplaced, AuditUnavailable, WriterConflict
from audit.records import AuditRecord, EventType, now_ms
from audit.stores import Store, StoredRecord
from audit.syslog_shipper import SyslogShipper

log = structlog.get_logger("xinserve.audit")


_T = TypeVar("_T")

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


class ChainWriter:
    """The group-commit writer of one chain: its state, its two threads, its store connection.

    ``AuditLog`` builds it and owns its lifecycle (:meth:`start`, :meth:`stop`, :meth:`release`);
    retention runs on its thread (:meth:`run_in_writer`) and seals purges with
    :meth:`commit_checkpoint`. ``clock`` gives the time in ms of the records and checkpoints
    it makes itself.
    """

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
        max_batch: int = 4096,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._store_factory = store_factory
        self.chain = chain
        self._signer = signer
        self.key_id = key_id
        self.checkpoint_interval_s = checkpoint_interval_s
        self.failure_policy = failure_policy
        self._backlog_limit = backlog_limit
        self._max_batch = max_batch
        self.clock = clock
        # Two single threads form a pipeline: the encoder assigns sequence numbers, encodes,
        # hashes and signs batch k+1 while the committer writes and fsyncs batch k.
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="audit-encoder")
        self._commit_executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="audit-committer"
        )
        self._store: Store | None = None
        self._state = ChainState(chain)
        self._pending: collections.deque[_Item | None] = collections.deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.healthy = True
        """False while the store refuses writes."""
        self.closed = False
        self.last_error: str | None = None
        self.last_checkpoint: SignedCheckpoint | None = None
        self.last_checkpoint_monotonic = time.monotonic()
        """``time.monotonic()`` when the last checkpoint was committed (or the writer made)."""
        self.shipper: SyslogShipper | None = None
        self._ship_records = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    @property
    def store(self) -> Store | None:
        """The writer's store connection (``None`` before the chain is adopted and after release)."""
        return self._store

    @property
    def seq(self) -> int:
        """The last sequence number assigned."""
        return self._state.seq

    @property
    def backlog(self) -> int:
        """Records waiting in the ``log_and_continue`` backlog."""
        return len(self._state.backlog)

    @property
    def pending_lost(self) -> int:
        """Records dropped from a full backlog and not yet recorded as lost."""
        return self._state.pending_lost

    def attach_shipper(self, shipper: SyslogShipper) -> None:
        """Offer every committed checkpoint (and, with ``ship_records``, every record) to ``shipper``."""
        self.shipper = shipper
        self._ship_records = shipper.settings.ship_records

    async def on_encoder(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the encoder thread and bind the writer to the running loop (open time)."""
        loop = asyncio.get_running_loop()
        self._loop, self._loop_thread = loop, threading.get_ident()
        return await loop.run_in_executor(self._executor, fn)

    def start(self) -> None:
        """Start the writer task (after :meth:`adopt`)."""
        self._task = asyncio.create_task(self._writer(), name="audit-writer")

    async def stop(self) -> None:
        """Refuse new appends, write everything queued before, end the writer task."""
        self.closed = True
        self._pending.append(None)
        self._wake.set()
        if self._task is not None:
            await self._task

    async def cancel(self) -> None:
        """End the writer task at once (a crash: what is queued is not written)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def release(self, *, after_cancel: bool = False) -> None:
        """Close the store connection and end both threads; ``after_cancel``: let a running write end first."""
        if after_cancel:
            await asyncio.to_thread(self._commit_executor.shutdown, wait=True)
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_store)
        self._executor.shutdown(wait=True)
        self._commit_executor.shutdown(wait=True)

    def abandon(self) -> None:
        """End both threads without waiting (the chain could not be opened)."""
        self._executor.shutdown(wait=False)
        self._commit_executor.shutdown(wait=False)

    def adopt(
        self, store: Store, position: tuple[int, bytes, int, bytes], kind: CheckpointKind, extra: dict[str, Any]
    ) -> None:
        """Encoder thread, at open: take over ``store`` with the chain at ``position`` (``seq, head,
        checkpoint n, checkpoint digest``) and seal it with a ``kind`` checkpoint. Raises what the
        store raises (the store is closed then)."""
        self._store = store
        self._state.move_to(position)
        try:
            self.commit_checkpoint(kind, extra, lambda cp: store.write([], [cp]))
        except BaseException:
            store.close()
            self._store = None
            raise

    async def _submit(self, kind: str, payload: Any) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append(_Item(kind, payload, fut))
        self._wake.set()
        return await fut

    async def checkpoint(self, kind: CheckpointKind) -> SignedCheckpoint:
        """Write a signed checkpoint after everything queued before (``AuditUnavailable`` if it cannot)."""
        result: SignedCheckpoint = await self._submit("cp", (kind, {}))
        return result

    def shipping_blocked(self) -> bool:
        """``fail_closed`` and the shipper's buffer for an unreachable collector is full."""
        return self.shipper is not None and self.failure_policy is FailurePolicy.FAIL_CLOSED and self.shipper.full

    async def append(self, record: AuditRecord, *, _internal: bool = False) -> int | None:
        """Append ``record``; return its sequence number once it is durably stored.

        ``fail_closed``: raises :class:`AuditUnavailable` if it cannot be stored, or while the
        anchor buffer of an unreachable syslog collector is full.
        ``log_and_continue``: returns ``None`` instead (the record waits in a bounded backlog).
        Raises :class:`AuditEncodingError` for a record that cannot be encoded.
        """
        if self.closed:
            raise AuditUnavailable("the audit log is closed")
        if not _internal and self.shipping_blocked():
            raise AuditUnavailable(UNAVAILABLE_MESSAGE)
        fut: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Item("rec", record, fut))
        self._wake.set()
        return await fut

    async def run_in_writer(self, fn: Callable[[Store, ChainWriter], Any]) -> Any:
        """Run ``fn(store, writer)`` on the writer thread between batches (retention uses this)."""
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
                await self._run_call(loop, item)
                continue
            batch = self._take_batch()
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

    async def _run_call(self, loop: asyncio.AbstractEventLoop, item: _Item) -> None:
        """Run a ``run_in_writer`` job on the encoder thread; its result or error goes to its caller."""
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

    def _take_batch(self) -> list[_Item]:
        """Everything queued up to ``max_batch`` items, up to the next job or the end marker."""
        pending = self._pending
        batch: list[_Item] = []
        while pending and len(batch) < self._max_batch:
            nxt = pending[0]
            if nxt is None or nxt.kind == "call":
                break
            batch.append(nxt)
            pending.popleft()
        return batch

    def _call_sync(self, fn: Callable[[Store, ChainWriter], Any]) -> Any:
        if self._store is None:
            self._store = self._store_factory()
            self._store.lock_writer(self.chain)
        return fn(self._store, self)

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
            st.resync(self._store)
        saved = st.position()
        records: list[StoredRecord] = []
        checkpoints: list[SignedCheckpoint] = []
        results: list[Any] = []
        lost, st.pending_lost = st.pending_lost, 0
        backlog = list(st.backlog)
        st.backlog.clear()
        try:
            if lost:
                st.append_record(
                    AuditRecord(
                        event=EventType.AUDIT_RECORDS_LOST,
                        outcome="DATA_LOSS",
                        time_ms=self.clock(),
                        detail={"count": lost},
                    ),
                    records,
                )
            for rec in backlog:
                with contextlib.suppress(AuditEncodingError):
                    st.append_record(rec, records)
            for item in batch:
                if item.kind == "rec":
                    try:
                        results.append(st.append_record(item.payload, records))
                    except AuditEncodingError as exc:
                        results.append(exc)
                else:
                    kind, extra = item.payload
                    cp = self.make_checkpoint(kind, extra)
                    checkpoints.append(cp)
                    results.append(cp)
        except BaseException:
            st.move_to(saved)
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
        if self._ship_records and self.shipper is not None:
            for r in prepared.records:
                self.shipper.offer_record(r.chain, r.seq, r.time_ms, r.hash, r.body)
        for cp in prepared.checkpoints:
            self._after_checkpoint(cp)

    def _rollback(self, prepared: _Prepared) -> None:
        """Undo a prepared batch that was not written (called with no encoding in progress)."""
        st = self._state
        st.move_to(prepared.saved)
        st.needs_resync = True
        st.pending_lost += prepared.lost
        st.backlog.extendleft(reversed(prepared.backlog))

    def commit_checkpoint(
        self, kind: CheckpointKind, extra: dict[str, Any], write: Callable[[SignedCheckpoint], _T]
    ) -> tuple[SignedCheckpoint, _T]:
        """Writer thread: make the next signed checkpoint and ``write`` it (one transaction of the
        caller's); if ``write`` raises, the checkpoint number is given back and the error raised."""
        st = self._state
        saved = (st.cp_n, st.cp_digest)
        cp = self.make_checkpoint(kind, extra)
        try:
            result = write(cp)
        except BaseException:
            st.cp_n, st.cp_digest = saved
            raise
        self._after_checkpoint(cp)
        return cp, result

    def make_checkpoint(self, kind: CheckpointKind, extra: dict[str, Any]) -> SignedCheckpoint:
        """Writer thread: the next signed checkpoint of the chain as it stands (numbered, not written)."""
        return self._state.next_checkpoint(
            kind,
            extra,
            time_ms=self.clock(),
            interval_s=int(self.checkpoint_interval_s),
            key_id=self.key_id,
            signer=self._signer,
        )

    def _after_checkpoint(self, cp: SignedCheckpoint) -> None:
        self.last_checkpoint = cp
        self.last_checkpoint_monotonic = time.monotonic()
        metrics.CHECKPOINTS.inc()
        shipper, loop = self.shipper, self._loop
        if shipper is not None and loop is not None:
            if threading.get_ident() == self._loop_thread:
                shipper.offer_checkpoint(cp)
            else:
                loop.call_soon_threadsafe(shipper.offer_checkpoint, cp)

    def _on_success(self, batch: list[_Item], results: list[Any]) -> None:
        if not self.healthy:
            log.warning("audit_store_recovered", chain=self.chain)
        self.healthy = True
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
        if self.healthy:
            log.error("audit_store_failed", chain=self.chain, error=str(exc), policy=str(self.failure_policy))
            if isinstance(exc, AuditStoreReplaced):
                self._alert_store_replaced(exc)
        self.healthy = False
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
        if self.shipper is not None:
            self.shipper.offer_alert(
                str(EventType.AUDIT_STORE_REPLACED),
                {"chain": self.chain, "seq": self._state.seq, "reason": str(exc)},
                self.clock(),
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
