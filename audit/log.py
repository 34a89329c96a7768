"""``AuditLog``: durable, group-committed, hash-chained appends with signed checkpoints.

Usage (the server)::

    log = await AuditLog.open(settings, signer=server_key)   # verifies the last checkpoint
    seq = await log.append(AuditRecord(event=EventType.RPC, ...))  # durable when it returns
    ...
    await log.close()                                         # flush + closing checkpoint

The parts, one module each: ``audit.writer`` (state and the group-commit pipeline),
``audit.recovery`` (open-time checks and sealing a crashed tail), ``audit.scheduling``
(periodic checkpoints, disk watermark, retention), ``audit.reading`` (queries, exports and
verification for ``AuditService``), ``audit.keys`` (the checkpoint key), and
``audit.syslog_shipper`` (anchors off the host). The event loop never blocks on disk,
database or hashing.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

import structlog

from audit import metrics
from audit.chain import CheckpointKind, SignedCheckpoint
from audit.config import AuditSettings, StoreKind
from audit.errors import AuditError, AuditStoreError, AuditUnavailable
from audit.keys import load_signer
from audit.reading import Reading
from audit.records import AuditRecord, EventType, now_ms
from audit.recovery import AuditIntegrityError, ChainRecovery, RecoveryInfo
from audit.scheduling import Scheduling
from audit.stores import open_store
from audit.syslog_shipper import SyslogShipper
from audit.writer import UNAVAILABLE_MESSAGE, LogCore

log = structlog.get_logger("xinserve.audit")

__all__ = ["UNAVAILABLE_MESSAGE", "AuditIntegrityError", "AuditLog", "LogCore", "RecoveryInfo", "load_signer"]


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


class AuditLog(ChainRecovery, Scheduling, Reading):
    """The audit log of one writer (chain). Create with :meth:`open`."""

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
        self._shipper = shipper
        self._ship_records = shipper.settings.ship_records

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

    @property
    def healthy(self) -> bool:
        """False while the store refuses writes, or (``fail_closed``) while the anchor buffer for an
        unreachable syslog collector is full (the server reports NOT_SERVING / refuses calls)."""
        return self._healthy and not self._shipping_blocked()

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
            **self._anchor_detail(),
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

    def _anchor_detail(self) -> dict[str, str]:
        """``anchor`` (``AuditSettings.anchor_posture``) and, when waived, ``anchor_waiver``."""
        if self.settings is None:
            return {}
        posture = self.settings.anchor_posture
        waiver = self.settings.anchor_waiver if posture == "waived" else None
        return {"anchor": posture, **({"anchor_waiver": waiver} if waiver else {})}

    async def checkpoint(self, kind: CheckpointKind = CheckpointKind.PERIODIC) -> SignedCheckpoint:
        """Write a signed checkpoint now (after everything appended before this call)."""
        if self._closed:
            raise AuditUnavailable("the audit log is closed")
        return await self._submit("cp", (kind, {}))

    async def close(self) -> None:
        """Flush everything queued, write the closing checkpoint, release the store."""
        if self._closed:
            return
        self._closing = True
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
