"""``AuditLog``: durable, group-committed, hash-chained appends with signed checkpoints.

Usage (the server)::

    log = await AuditLog.open(settings, signer=server_key)   # verifies the last checkpoint
    seq = await log.append(AuditRecord(event=EventType.RPC, ...))  # durable when it returns
    ...
    await log.close()                                         # flush + closing checkpoint

Concurrency: ``append`` puts the record on a queue; one writer task takes everything queued
(up to ``max_batch``), and a single dedicated thread assigns sequence numbers, encodes,
hashes and commits it in one transaction (one fsync) — group commit. The event loop never
blocks on disk, database or hashing.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from audit import metrics
from audit.chain import GENESIS, Checkpoint, CheckpointKind, SignedCheckpoint, Signer, chain_hash
from audit.config import AuditSettings, FailurePolicy
from audit.errors import (
    AuditConfigError,
    AuditEncodingError,
    AuditError,
    AuditStoreError,
    AuditUnavailable,
    WriterConflict,
)
from audit.records import AuditRecord, EventType, encode_record, now_ms
from audit.stores import QueryFilter, Store, StoredRecord, open_store
from audit.syslog_shipper import SyslogShipper

log = structlog.get_logger("xinserve.audit")

UNAVAILABLE_MESSAGE = "the audit log cannot record this call (audit store unavailable); refusing it"


class AuditIntegrityError(AuditError):
    """At open, the last checkpoint or the unsigned tail does not verify: the log was altered."""


@dataclass(frozen=True, slots=True)
class RecoveryInfo:
    """What :meth:`AuditLog.open` found: a clean previous close, or a crash it recovered from."""

    unclean_shutdown: bool
    previous_checkpoint: int | None
    unsigned_tail: int
    """Records after the previous checkpoint, now covered by the recovery checkpoint."""
    last_seq: int


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


class AuditLog:
    """The audit log of one writer (chain). Create with :meth:`open`."""

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

    # ------------------------------------------------------------------ opening

    @classmethod
    async def open(
        cls,
        settings: AuditSettings,
        signer: Any | None = None,
        *,
        clock: Callable[[], int] = now_ms,
        start_ticker: bool = True,
    ) -> AuditLog:
        """Open the configured store, check the end of the chain, seal a crashed tail, start.

        Checks (docs/audit.md, *Crashes and torn records*): the last checkpoint's form and
        signature, that the last signed record (at its ``tree_size``) re-chains from its
        predecessor's stored hash to the signed head, and that an unsigned tail chains from
        it — not the whole log (that is ``verify``). ``signer`` is the server's
        ``trust.sm2.Sm2PrivateKey``; without it the key is loaded from
        ``settings.signing_key_path``. Raises ``AuditConfigError`` (bad settings/key),
        ``AuditUnavailable`` (store unreachable), ``WriterConflict`` (another writer on this
        chain) or ``AuditIntegrityError`` (one of those checks fails: the log was altered).
        """
        if signer is None:
            signer = load_signer(settings)
        key_id = signer.public_key().key_id
        self = cls(
            lambda: open_store(settings),
            chain=settings.node_id,
            signer=signer,
            key_id=key_id,
            checkpoint_interval_s=settings.checkpoint_interval_s,
            failure_policy=settings.failure_policy,
            backlog_limit=settings.backlog_limit,
            retry_interval_s=settings.retry_interval_s,
            max_batch=settings.max_batch,
            clock=clock,
            settings=settings,
        )
        self._verifier = signer.public_key()
        if settings.syslog is not None:
            self.attach_shipper(SyslogShipper(settings.syslog, tsa=settings.tsa, on_state=self._shipping_event))
        await self.start(start_ticker=start_ticker)
        return self

    def attach_shipper(self, shipper: SyslogShipper) -> None:
        """Ship every checkpoint (and, with ``ship_records``, every record) through ``shipper``."""
        self._shipper = shipper
        self._ship_records = shipper.settings.ship_records

    async def _shipping_event(self, state: str, detail: dict[str, Any]) -> None:
        outcome = {"up": "OK", "lost": "DATA_LOSS"}.get(state, "UNAVAILABLE")
        with contextlib.suppress(AuditUnavailable):
            await self.append(
                AuditRecord(
                    event=EventType.AUDIT_ANCHOR_SHIPPING,
                    outcome=outcome,
                    time_ms=self._clock(),
                    detail={"state": state, **detail},
                ),
                _internal=True,
            )

    async def start(self, *, start_ticker: bool = True) -> None:
        loop = asyncio.get_running_loop()
        self._loop, self._loop_thread = loop, threading.get_ident()
        try:
            await loop.run_in_executor(self._executor, self._open_sync)
        except AuditStoreError as exc:
            self._executor.shutdown(wait=False)
            self._commit_executor.shutdown(wait=False)
            raise AuditUnavailable(f"audit store unreachable at start: {exc}") from None
        except BaseException:
            self._executor.shutdown(wait=False)
            self._commit_executor.shutdown(wait=False)
            raise
        self._writer_task = asyncio.create_task(self._writer(), name="audit-writer")
        if self._shipper is not None:
            self._shipper.start()
        if start_ticker:
            self._ticker_task = asyncio.create_task(self._ticker(), name="audit-checkpointer")
        metrics.HEALTHY.set(1)
        if self.recovery is not None and self.recovery.unclean_shutdown:
            log.warning(
                "audit_recovered_unclean_shutdown",
                chain=self.chain,
                unsigned_tail=self.recovery.unsigned_tail,
                last_seq=self.recovery.last_seq,
            )
            await self.append(
                AuditRecord(
                    event=EventType.AUDIT_RECOVERED,
                    time_ms=self._clock(),
                    detail={
                        "unclean_shutdown": True,
                        "unsigned_tail": self.recovery.unsigned_tail,
                        "last_seq": self.recovery.last_seq,
                    },
                )
            )

    def _open_sync(self) -> None:
        store = self._store_factory()
        try:
            if store.schema_exists():
                altered = store.schema_problems()
                if altered:
                    raise AuditIntegrityError(
                        f"the audit store's tables were altered ({'; '.join(altered)}); run `xinserve audit verify`"
                    )
            store.create_schema()
            store.lock_writer(self.chain)
            head = store.head(self.chain)
            try:
                last = store.last_checkpoint(self.chain)
            except AuditEncodingError:
                raise AuditIntegrityError(
                    "the last audit checkpoint is malformed (altered); run `xinserve audit verify`"
                ) from None
        except BaseException:
            store.close()
            raise
        self._store = store
        st = self._state
        prev_n: int | None = None
        tail = 0
        unclean = False
        if last is not None:
            cp = last.checkpoint
            prev_n = cp.n
            verifier = self._verifier
            if verifier is not None and cp.key_id == verifier.key_id:
                from trust.errors import InvalidSignature

                try:
                    verifier.verify(last.signature, last.payload)
                except InvalidSignature:
                    store.close()
                    raise AuditIntegrityError(
                        f"the last audit checkpoint (n={cp.n}) has an invalid signature; run `xinserve audit verify`"
                    ) from None
            elif verifier is not None:
                log.warning("audit_checkpoint_key_rotated", chain=self.chain, old_key_id=cp.key_id)
            st.cp_n, st.cp_digest = cp.n, last.checkpoint.digest()
            st.seq, st.head = cp.tree_size, cp.head
            if head is not None and head[0] < cp.tree_size:
                store.close()
                raise AuditIntegrityError(
                    f"audit records end at {head[0]} but checkpoint n={cp.n} covers {cp.tree_size}; "
                    "run `xinserve audit verify`"
                )
            problem = _signed_record_problem(store, self.chain, cp, self._verifier)
            if problem is not None:
                store.close()
                raise AuditIntegrityError(f"{problem}; run `xinserve audit verify`")
            # Re-chain the unsigned tail (records after the last checkpoint) to verify it.
            if head is not None and head[0] > cp.tree_size:
                h = cp.head
                expect = cp.tree_size + 1
                for seq, body, stored_hash in store.iter_hashes(self.chain, cp.tree_size + 1, None):
                    h = chain_hash(h, body)
                    if seq != expect or h != stored_hash:
                        store.close()
                        raise AuditIntegrityError(
                            f"audit record {expect} after checkpoint n={cp.n} does not chain; "
                            "run `xinserve audit verify`"
                        )
                    expect += 1
                    tail += 1
                st.seq, st.head = head
            unclean = cp.kind is not CheckpointKind.CLOSE or tail > 0
        elif head is not None:
            # Records but no checkpoint at all: only legitimate if the first checkpoint was
            # never written (crash within the first interval). Re-chain from genesis.
            h = GENESIS
            expect = 1
            for seq, body, stored_hash in store.iter_hashes(self.chain, 1, None):
                h = chain_hash(h, body)
                if seq != expect or h != stored_hash:
                    store.close()
                    raise AuditIntegrityError(f"audit record {expect} does not chain; run `xinserve audit verify`")
                expect += 1
                tail += 1
            st.seq, st.head = head
            unclean = True
        kind = CheckpointKind.RECOVERY if unclean else CheckpointKind.OPEN
        extra: dict[str, Any] = {}
        if unclean:
            extra = {"unclean_shutdown": True, "unsigned_tail": tail}
        self.recovery = RecoveryInfo(unclean, prev_n, tail, st.seq)
        cp_signed = self._make_checkpoint(kind, extra)
        try:
            store.write([], [cp_signed])
        except BaseException:
            self._state.cp_n -= 1
            store.close()
            self._store = None
            raise
        self._after_checkpoint(cp_signed)

    # ------------------------------------------------------------------ public API

    @property
    def healthy(self) -> bool:
        """False while the store refuses writes, or (``fail_closed``) while the anchor buffer for an
        unreachable syslog collector is full (the server reports NOT_SERVING / refuses calls)."""
        return self._healthy and not self._shipping_blocked()

    def _shipping_blocked(self) -> bool:
        return self._shipper is not None and self.failure_policy is FailurePolicy.FAIL_CLOSED and self._shipper.full

    @property
    def shipper(self) -> SyslogShipper | None:
        """The syslog shipper of the anchors, if one is configured."""
        return self._shipper

    @property
    def last_seq(self) -> int:
        return self._state.seq

    @property
    def latest_checkpoint(self) -> SignedCheckpoint | None:
        """The latest signed checkpoint written by this process (AuditService's GetLatestCheckpoint)."""
        return self._last_checkpoint

    def health_detail(self) -> dict[str, Any]:
        """A small dict for the server's health/diagnostics (no paths or secrets)."""
        return {
            "healthy": self._healthy,
            "policy": str(self.failure_policy),
            "last_error": self.last_error,
            "backlog": len(self._state.backlog),
            "disk_warning": self.disk_warning,
            "last_seq": self._state.seq,
            **(
                {
                    "syslog_connected": self._shipper.connected,
                    "syslog_buffered": self._shipper.buffered,
                    "syslog_lost": self._shipper.lost,
                }
                if self._shipper is not None
                else {}
            ),
        }

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

    async def checkpoint(self, kind: CheckpointKind = CheckpointKind.PERIODIC) -> SignedCheckpoint:
        """Write a signed checkpoint now (after everything appended before this call)."""
        if self._closed:
            raise AuditUnavailable("the audit log is closed")
        return await self._submit("cp", (kind, {}))

    async def run_in_writer(self, fn: Callable[[Store, AuditLog], Any]) -> Any:
        """Run ``fn(store, log)`` on the writer thread between batches (retention uses this)."""
        return await self._submit("call", fn)

    async def _submit(self, kind: str, payload: Any) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append(_Item(kind, payload, fut))
        self._wake.set()
        return await fut

    async def query(self, flt: QueryFilter) -> list[StoredRecord]:
        """Run a query on a separate connection in a worker thread."""

        def run() -> list[StoredRecord]:
            with self._store_factory() as store:
                return list(store.query(flt))

        return await asyncio.to_thread(run)

    async def verify(self, keys: list[Any] | None = None, **kwargs: Any) -> Any:
        """Verify the store (all chains) in a worker thread: ``audit.verify.verify_store``.

        ``keys`` default to this server's public key; keyword arguments (``chain``, ``start``,
        ``end``, ``now_ms``, ``anchors``) are passed on. Returns a ``VerifyReport``; the caller
        records an ``audit_verified`` event with its outcome. Raises ``AuditConfigError`` (no key),
        and from ``verify_store``: ``UnknownChainError`` (no such chain), ``AuditRangeError`` (bad
        range, or ``start`` past the chain's last record) and ``AuditStoreError``.
        """
        from audit.verify import verify_store

        trusted = keys if keys is not None else [self._verifier]
        if not trusted or trusted[0] is None:
            raise AuditConfigError("no public key to verify with")

        def run() -> Any:
            with self._store_factory() as store:
                return verify_store(store, trusted, **kwargs)

        return await asyncio.to_thread(run)

    async def stream(self, flt: QueryFilter, *, chunk: int = 500) -> AsyncIterator[dict[str, Any]]:
        """Matching records as export dicts (see ``audit.query.stored_to_json``), streamed.

        For ``AuditService``'s JSON-lines export: a worker thread reads on its own connection
        and hands over chunks through a bounded queue, so memory stays flat for any range.
        """
        from audit.query import query_records

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=4)
        stop = threading.Event()
        done = object()

        def put(item: Any) -> None:
            asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()

        def produce() -> None:
            try:
                with self._store_factory() as store:
                    buf: list[dict[str, Any]] = []
                    for obj in query_records(store, flt):
                        buf.append(obj)
                        if len(buf) >= chunk:
                            put(buf)
                            buf = []
                            if stop.is_set():
                                return
                    if buf:
                        put(buf)
            except BaseException as exc:
                put(exc)
            finally:
                put(done)

        producer = loop.run_in_executor(None, produce)
        try:
            while (item := await queue.get()) is not done:
                if isinstance(item, BaseException):
                    if isinstance(item, AuditStoreError):
                        raise AuditUnavailable(f"audit store unavailable: {item}") from None
                    raise item
                for obj in item:
                    yield obj
        finally:
            stop.set()
            while not producer.done():
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
                await asyncio.sleep(0)
            with contextlib.suppress(BaseException):
                await producer

    async def close(self) -> None:
        """Flush everything queued, write the closing checkpoint, release the store."""
        if self._closed:
            return
        if self._ticker_task is not None:
            self._ticker_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker_task
        try:
            await self._submit("cp", (CheckpointKind.CLOSE, {}))
        except AuditError as exc:
            log.error(
                "audit_close_checkpoint_failed",
                chain=self.chain,
                error=str(exc),
                backlog_lost=len(self._state.backlog) + self._state.pending_lost,
            )
        self._closed = True
        self._pending.append(None)
        self._wake.set()
        if self._writer_task is not None:
            await self._writer_task
        if self._shipper is not None:
            await self._shipper.close()
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_store)
        self._executor.shutdown(wait=True)
        self._commit_executor.shutdown(wait=True)

    def _close_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    async def abort(self) -> None:
        """Stop without a closing checkpoint (tests: simulates a crash)."""
        self._closed = True
        if self._shipper is not None:
            await self._shipper.close(timeout_s=0)
        for task in (self._ticker_task, self._writer_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await asyncio.to_thread(self._commit_executor.shutdown, wait=True)  # let a running write end
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_store)
        self._executor.shutdown(wait=True)
        self._commit_executor.shutdown(wait=True)

    # ------------------------------------------------------------------ writer

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

    def _call_sync(self, fn: Callable[[Store, AuditLog], Any]) -> Any:
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

    # ------------------------------------------------------------------ ticker

    async def _ticker(self) -> None:
        """Periodic signed checkpoints (also when idle), recovery probes, disk watermark, retention."""
        from audit.retention import check_disk

        settings = self.settings
        next_retention = time.monotonic() + self.checkpoint_interval_s
        while True:
            delay = self.checkpoint_interval_s if self._healthy else self._retry_interval_s
            elapsed = time.monotonic() - self._last_cp_monotonic
            await asyncio.sleep(max(0.05, delay - elapsed) if self._healthy else delay)
            if self._healthy and time.monotonic() - self._last_cp_monotonic < self.checkpoint_interval_s * 0.95:
                continue
            with contextlib.suppress(AuditError):
                await self._submit("cp", (CheckpointKind.PERIODIC, {}))
            path = self._usage_path()
            if path is not None and self.settings is not None:
                status = await asyncio.to_thread(check_disk, path, self.settings.disk_warn_ratio)
                self.disk_warning = status.warning
            if settings is not None and settings.retention_enabled and time.monotonic() >= next_retention:
                next_retention = time.monotonic() + settings.retention_interval_s
                await self._retention_tick()

    async def _retention_tick(self) -> None:
        from audit.retention import run_retention

        try:
            await run_retention(self)
        except AuditError as exc:
            log.error("audit_retention_failed", chain=self.chain, error=str(exc))
        except OSError as exc:
            log.error("audit_retention_failed", chain=self.chain, error=exc.strerror or type(exc).__name__)

    def _usage_path(self) -> str | None:
        store = self._store
        return store.usage_path() if store is not None else None


def _signed_record_problem(store: Store, chain: str, cp: Checkpoint, verifier: Any = None) -> str | None:
    """Why the record at ``cp.tree_size`` does not have the head ``cp`` signs, or ``None``.

    Recomputes ``SM3(h[tree_size-1] || body[tree_size])`` from the record's stored body and its
    predecessor's stored hash (genesis for record 1, the ``anchor_hash`` of the purge that
    removed the predecessor) and compares it, and the record's stored hash, with ``cp.head``.
    A record removed by a purge is accepted when that purge checkpoint's anchor is the signed
    head (and, if signed with ``verifier``'s key, its signature verifies). Only this one record
    is checked: the rest of the log is ``verify``'s job. Reads the store (``AuditStoreError``).
    """
    n = cp.tree_size
    if n <= 0:
        return None
    rows = {seq: (body, h) for seq, body, h in store.iter_hashes(chain, max(1, n - 1), n)}
    if n not in rows:
        anchor = _purge_anchor(store, chain, n, verifier)
        if anchor is None:
            return f"record {n}, signed by checkpoint n={cp.n}, is missing"
        if anchor != cp.head:
            return f"the purge anchor of record {n} does not match checkpoint n={cp.n}"
        return None
    body, stored = rows[n]
    prev = GENESIS if n == 1 else rows[n - 1][1] if n - 1 in rows else _purge_anchor(store, chain, n - 1)
    if prev is None:
        return f"record {n - 1}, before the record checkpoint n={cp.n} signs, is missing"
    if stored != cp.head or chain_hash(prev, body) != cp.head:
        return f"record {n} does not match checkpoint n={cp.n} (its body or hash was altered)"
    return None


def _purge_anchor(store: Store, chain: str, through: int, verifier: Any = None) -> bytes | None:
    """``anchor_hash`` of a purge checkpoint that removed records through ``through``, if any.

    With ``verifier``, a purge checkpoint signed with its key must carry a valid signature.
    """
    from trust.errors import InvalidSignature

    for _, payload, signature in store.raw_checkpoints(chain):
        try:
            cp = Checkpoint.from_payload(payload)
            if cp.kind is not CheckpointKind.PURGE or int(cp.extra["purged_through"]) != through:
                continue
            if verifier is not None and cp.key_id == verifier.key_id:
                verifier.verify(signature, payload)
            return bytes.fromhex(str(cp.extra["anchor_hash"]))
        except (AuditEncodingError, InvalidSignature, KeyError, ValueError, TypeError):
            continue
    return None


def _as_store_error(exc: Exception) -> AuditStoreError:
    if isinstance(exc, AuditStoreError):
        return exc
    log.error("audit_writer_internal_error", error_type=type(exc).__name__, exc_info=exc)
    return AuditStoreError(f"internal error in the audit writer ({type(exc).__name__})")


def load_signer(settings: AuditSettings, *, create: bool = False) -> Any:
    """The checkpoint signing key (``trust.sm2.Sm2PrivateKey``) from ``settings.signing_key_path``.

    Decrypts it with the password from ``signing_key_password_env`` or
    ``signing_key_password_file``; refuses a key or password file its group or others can access
    unless ``allow_insecure_key_permissions``. ``create``: generate the key (0600, encrypted
    with the password if one is configured) when the file does not exist (the server's first
    start). Raises ``AuditConfigError`` (safe to show: no path or password in it).
    """
    from trust.errors import KeyFormatError
    from trust.key_files import InsecureFileError, read_password
    from trust.server_key import ensure_server_key

    path = settings.signing_key_path
    if path is None:
        raise AuditConfigError("audit needs an SM2 signing key (signing_key_path or the server key)")
    allow = settings.allow_insecure_key_permissions
    try:
        password = read_password(
            settings.signing_key_password_env, settings.signing_key_password_file, allow_insecure=allow
        )
    except KeyError as exc:
        raise AuditConfigError(f"environment variable {exc.args[0]} is not set") from None
    except (ValueError, InsecureFileError) as exc:
        raise AuditConfigError(f"the audit signing key's password: {exc}") from None
    except OSError as exc:
        raise AuditConfigError(f"cannot read the audit signing key's password file: {exc.strerror}") from None
    if not create and not path.exists():
        raise AuditConfigError("cannot read the audit signing key: No such file or directory")
    try:
        return ensure_server_key(path, password, allow_insecure=allow)
    except InsecureFileError as exc:
        raise AuditConfigError(str(exc)) from None
    except OSError as exc:
        raise AuditConfigError(f"cannot read the audit signing key: {exc.strerror}") from None
    except KeyFormatError as exc:
        raise AuditConfigError(f"the audit signing key is unusable: {exc}") from None
