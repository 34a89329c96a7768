"""``AuditLog``: durable, group-committed, hash-chained appends with signed checkpoints.

Usage (the server)::

    log = await AuditLog.open(settings, signer=server_key)   # verifies the last checkpoint
    seq = await log.append(AuditRecord(event=EventType.RPC, ...))  # durable when it returns
    ...
    await log.close()                                         # flush + closing checkpoint

``AuditLog`` is a facade over parts that each get only what they need, one module each:
``audit.writer`` (``ChainWriter``: the chain state and the group-commit pipeline),
``audit.recovery`` (``open_chain``: open-time checks of the chain's end, finding a crashed
tail), ``audit.scheduling`` (``Scheduler``: periodic checkpoints, disk watermark, retention,
given callables), ``audit.reading`` (``Reader``: queries, exports and verification for
``AuditService``), ``audit.keys`` (the checkpoint key) and ``audit.syslog_shipper`` (anchors
off the host). The event loop never blocks on disk, database or hashing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import structlog

from audit import metrics
from audit.chain import CheckpointKind, SignedCheckpoint, Verifier
from audit.config import AuditSettings, FailurePolicy, StoreKind
from audit.errors import AuditError, AuditStoreError, AuditUnavailable
from audit.keys import load_signer
from audit.reading import Reader
from audit.records import AuditRecord, EventType, now_ms
from audit.recovery import AuditIntegrityError, RecoveryInfo, open_chain
from audit.retention import run_retention
from audit.scheduling import Scheduler
from audit.stores import QueryFilter, Store, StoredRecord, open_store
from audit.syslog_shipper import SyslogShipper
from audit.verify import VerifyReport
from audit.writer import UNAVAILABLE_MESSAGE, ChainWriter

log = structlog.get_logger("xinserve.audit")

__all__ = ["UNAVAILABLE_MESSAGE", "AuditIntegrityError", "AuditLog", "ChainWriter", "RecoveryInfo", "load_signer"]


def earlier_log_traces(settings: AuditSettings) -> list[str]:
    """What is left of an earlier SQLite log whose database file is missing: ``writer lock``
    (``<db>.lock``, made by every writer and never removed), ``-wal``/``-shm`` files. Empty
    when the database exists or the store is PostgreSQL."""
    if settings.store is not StoreKind.SQLITE or settings.path.exists():
        return []
    from audit.stores.sqlite import writer_lock_path

    candidates = {
        "writer lock file": writer_lock_path(settings.path),
        "write-ahead log": settings.path.with_name(settings.path.name + "-wal"),
        "shared-memory file": settings.path.with_name(settings.path.name + "-shm"),
    }
    return [name for name, path in candidates.items() if path.exists()]


class AuditLog:
    """The audit log of one writer (chain). Create with :meth:`open`.

    A facade: appends and checkpoints go to its ``ChainWriter``, reads to its ``Reader``, the
    periodic work is its ``Scheduler``'s; the chain is opened by ``audit.recovery.open_chain``.
    """

    def __init__(
        self,
        store_factory: Callable[[], Store],
        *,
        chain: str,
        signer: Any,
        key_id: str,
        checkpoint_interval_s: float = 60,
        failure_policy: FailurePolicy = FailurePolicy.FAIL_CLOSED,
        backlog_limit: int = 100_000,
        retry_interval_s: float = 2.0,
        max_batch: int = 4096,
        clock: Callable[[], int] = now_ms,
        settings: AuditSettings | None = None,
        verifier: Verifier | None = None,
    ) -> None:
        self._store_factory = store_factory
        self.settings = settings
        self._clock = clock
        self._verifier = verifier
        self._closing = False
        """Set when ``close`` starts: the log's own events are no longer appended (they would
        follow the closing checkpoint)."""
        self.recovery: RecoveryInfo | None = None
        self._writer = ChainWriter(
            store_factory,
            chain=chain,
            signer=signer,
            key_id=key_id,
            checkpoint_interval_s=checkpoint_interval_s,
            failure_policy=failure_policy,
            backlog_limit=backlog_limit,
            max_batch=max_batch,
            clock=clock,
        )
        self._reader = Reader(store_factory, verifier)
        writer = self._writer
        self._scheduler = Scheduler(
            chain,
            interval_s=checkpoint_interval_s,
            retry_interval_s=retry_interval_s,
            healthy=lambda: writer.healthy,
            last_checkpoint_at=lambda: writer.last_checkpoint_monotonic,
            checkpoint=lambda: writer.checkpoint(CheckpointKind.PERIODIC),
            usage_path=self._usage_path,
            disk_warn_ratio=settings.disk_warn_ratio if settings is not None else None,
            retention=self._retention if settings is not None and settings.retention_enabled else None,
            retention_interval_s=settings.retention_interval_s if settings is not None else 86_400,
        )

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
        traces = earlier_log_traces(settings)
        if traces and not settings.previous_log_retired:
            raise AuditIntegrityError(
                f"no audit database, but an earlier log's {', '.join(traces)} exist: the log was deleted or moved; "
                "restore it, or set audit.previous_log_retired if it was retired on purpose"
            )
        if signer is None:
            signer = load_signer(settings)
        verifier = signer.public_key()
        self = cls(
            lambda: open_store(settings),
            chain=settings.node_id,
            signer=signer,
            key_id=verifier.key_id,
            checkpoint_interval_s=settings.checkpoint_interval_s,
            failure_policy=settings.failure_policy,
            backlog_limit=settings.backlog_limit,
            retry_interval_s=settings.retry_interval_s,
            max_batch=settings.max_batch,
            clock=clock,
            settings=settings,
            verifier=verifier,
        )
        if settings.syslog is not None:
            self.attach_shipper(SyslogShipper(settings.syslog, tsa=settings.tsa, on_state=self._shipping_event))
        await self.start(start_ticker=start_ticker)
        if traces:
            log.warning("audit_previous_log_retired", chain=self.chain, traces=traces)
            await self.append(
                AuditRecord(
                    event=EventType.AUDIT_STORE_REPLACED,
                    time_ms=self._clock(),
                    detail={"retired": True, "traces": ",".join(traces)},
                )
            )
        return self

    def attach_shipper(self, shipper: SyslogShipper) -> None:
        """Ship every checkpoint (and, with ``ship_records``, every record) through ``shipper``."""
        self._writer.attach_shipper(shipper)

    async def _shipping_event(self, state: str, detail: dict[str, Any]) -> None:
        outcome = {"up": "OK", "lost": "DATA_LOSS"}.get(state, "UNAVAILABLE")
        if self._closing:  # after the closing checkpoint nothing may be appended: log it only
            log.warning("audit_anchor_shipping_at_close", state=state, **detail)
            return
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

    def _open_sync(self) -> RecoveryInfo:
        """Encoder thread: check the chain's end, hand it to the writer, seal it."""
        opened = open_chain(self._store_factory, self.chain, self._verifier)
        kind, extra = opened.seal()
        self._writer.adopt(opened.store, opened.position, kind, extra)
        return opened.info

    async def start(self, *, start_ticker: bool = True) -> None:
        """Open the chain (``_open_sync``), start the writer, the shipper and (``start_ticker``) the
        scheduler; record ``audit_recovered`` after an unclean shutdown. Raises as :meth:`open`."""
        writer = self._writer
        try:
            self.recovery = await writer.on_encoder(self._open_sync)
        except AuditStoreError as exc:
            writer.abandon()
            raise AuditUnavailable(f"audit store unreachable at start: {exc}") from None
        except BaseException:
            writer.abandon()
            raise
        writer.start()
        if writer.shipper is not None:
            writer.shipper.start()
        if start_ticker:
            self._scheduler.start()
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

    @property
    def chain(self) -> str:
        """The chain this log writes (``settings.node_id``)."""
        return self._writer.chain

    @property
    def key_id(self) -> str:
        """The key id of the key that signs the checkpoints."""
        return self._writer.key_id

    @property
    def checkpoint_interval_s(self) -> float:
        return self._writer.checkpoint_interval_s

    @property
    def failure_policy(self) -> FailurePolicy:
        return self._writer.failure_policy

    @property
    def last_error(self) -> str | None:
        """Why the store last refused a write, ``None`` while it takes them."""
        return self._writer.last_error

    @property
    def disk_warning(self) -> str | None:
        """The disk watermark warning of the last scheduled check, ``None`` below it."""
        return self._scheduler.disk_warning

    @property
    def writer(self) -> ChainWriter:
        """The chain writer (retention runs its jobs and checkpoints through it)."""
        return self._writer

    @property
    def _store(self) -> Store | None:
        return self._writer.store

    @property
    def healthy(self) -> bool:
        """False while the store refuses writes, or (``fail_closed``) while the anchor buffer for an
        unreachable syslog collector is full (the server reports NOT_SERVING / refuses calls)."""
        return self._writer.healthy and not self._writer.shipping_blocked()

    @property
    def shipper(self) -> SyslogShipper | None:
        """The syslog shipper of the anchors, if one is configured."""
        return self._writer.shipper

    @property
    def last_seq(self) -> int:
        return self._writer.seq

    @property
    def latest_checkpoint(self) -> SignedCheckpoint | None:
        """The latest signed checkpoint written by this process (AuditService's GetLatestCheckpoint)."""
        return self._writer.last_checkpoint

    def health_detail(self) -> dict[str, Any]:
        """A small dict for the server's health/diagnostics (no paths or secrets)."""
        writer, shipper = self._writer, self._writer.shipper
        return {
            "healthy": writer.healthy,
            "policy": str(writer.failure_policy),
            "last_error": writer.last_error,
            "backlog": writer.backlog,
            "disk_warning": self.disk_warning,
            "last_seq": writer.seq,
            **self._anchor_detail(),
            **(
                {
                    "syslog_connected": shipper.connected,
                    "syslog_buffered": shipper.buffered,
                    "syslog_lost": shipper.lost,
                    **(
                        {
                            "timestamp_failures": shipper.timestamp_failures,
                            "timestamp_last_error": shipper.last_timestamp_error,
                        }
                        if self.settings is not None and self.settings.tsa is not None
                        else {}
                    ),
                }
                if shipper is not None
                else {}
            ),
        }

    def _anchor_detail(self) -> dict[str, str]:
        """``anchor`` (``AuditSettings.anchor_posture``) and, when waived, ``anchor_waiver``."""
        if self.settings is None:
            return {}
        posture = self.settings.anchor_posture
        waiver = self.settings.anchor_waiver if posture == "waived" else None
        return {"anchor": posture, **({"anchor_waiver": waiver} if waiver else {})}

    def _usage_path(self) -> str | None:
        store = self._writer.store
        return store.usage_path() if store is not None else None

    async def _retention(self) -> None:
        await run_retention(self)

    async def append(self, record: AuditRecord, *, _internal: bool = False) -> int | None:
        """Append ``record``; return its sequence number once it is durably stored.

        ``fail_closed``: raises :class:`AuditUnavailable` if it cannot be stored, or while the
        anchor buffer of an unreachable syslog collector is full.
        ``log_and_continue``: returns ``None`` instead (the record waits in a bounded backlog).
        Raises :class:`AuditEncodingError` for a record that cannot be encoded.
        """
        return await self._writer.append(record, _internal=_internal)

    async def run_in_writer(self, fn: Callable[[Store, ChainWriter], Any]) -> Any:
        """Run ``fn(store, writer)`` on the writer thread between batches (retention uses this)."""
        return await self._writer.run_in_writer(fn)

    async def query(self, flt: QueryFilter) -> list[StoredRecord]:
        """Run a query on a separate connection in a worker thread (``Reader.query``)."""
        return await self._reader.query(flt)

    async def verify(self, keys: list[Any] | None = None, **kwargs: Any) -> VerifyReport:
        """Verify the store (all chains) in a worker thread (``Reader.verify``, which documents the
        arguments and errors). Returns a ``VerifyReport``; the caller records an
        ``audit_verified`` event with its outcome."""
        return await self._reader.verify(keys, **kwargs)

    def stream(self, flt: QueryFilter, *, chunk: int = 500) -> AsyncIterator[dict[str, Any]]:
        """Matching records as export dicts, streamed in chunks of ``chunk`` (``Reader.stream``)."""
        return self._reader.stream(flt, chunk=chunk)

    async def checkpoint(self, kind: CheckpointKind = CheckpointKind.PERIODIC) -> SignedCheckpoint:
        """Write a signed checkpoint now (after everything appended before this call)."""
        if self._writer.closed:
            raise AuditUnavailable("the audit log is closed")
        return await self._writer.checkpoint(kind)

    async def close(self) -> None:
        """Flush everything queued, write the closing checkpoint, release the store."""
        writer = self._writer
        if writer.closed:
            return
        self._closing = True
        await self._scheduler.cancel()
        try:
            await writer.checkpoint(CheckpointKind.CLOSE)
        except AuditError as exc:
            log.error(
                "audit_close_checkpoint_failed",
                chain=self.chain,
                error=str(exc),
                backlog_lost=writer.backlog + writer.pending_lost,
            )
        await writer.stop()
        if writer.shipper is not None:
            await writer.shipper.close()
        await writer.release()

    async def abort(self) -> None:
        """Stop without a closing checkpoint (tests: simulates a crash)."""
        writer = self._writer
        writer.closed = True
        if writer.shipper is not None:
            await writer.shipper.close(timeout_s=0)
        await self._scheduler.cancel()
        await writer.cancel()
        await writer.release(after_cancel=True)  # let a running write end
