"""Scheduled work of ``AuditLog``: periodic signed checkpoints (also when idle), recovery
probes while the store is down, the disk watermark, and automatic retention.

The :class:`Scheduler` is given what it drives as callables, so it knows nothing of the writer
or the log: one to write a checkpoint, one to run retention, and the writer's health and the
time of its last checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from audit.errors import AuditError
from audit.retention import check_disk

log = structlog.get_logger("xinserve.audit")


class Scheduler:
    """The ticker of one chain (task ``audit-checkpointer``).

    Every ``interval_s`` since the last checkpoint (every ``retry_interval_s`` while ``healthy()``
    is false) it calls ``checkpoint()``; then it checks the disk holding ``usage_path()`` against
    ``disk_warn_ratio`` (``None``: not checked) and, every ``retention_interval_s``, calls
    ``retention()`` (``None``: no automatic retention). Errors of a checkpoint are the writer's to
    report; errors of retention are logged.
    """

    def __init__(
        self,
        chain: str,
        *,
        interval_s: float,
        retry_interval_s: float,
        healthy: Callable[[], bool],
        last_checkpoint_at: Callable[[], float],
        checkpoint: Callable[[], Awaitable[Any]],
        usage_path: Callable[[], str | None],
        disk_warn_ratio: float | None = None,
        retention: Callable[[], Awaitable[Any]] | None = None,
        retention_interval_s: float = 86_400,
    ) -> None:
        self.chain = chain
        self.interval_s = interval_s
        self.retry_interval_s = retry_interval_s
        self._healthy = healthy
        self._last_checkpoint_at = last_checkpoint_at
        self._checkpoint = checkpoint
        self._usage_path = usage_path
        self._disk_warn_ratio = disk_warn_ratio
        self._retention = retention
        self._retention_interval_s = retention_interval_s
        self._task: asyncio.Task[None] | None = None
        self.disk_warning: str | None = None
        """The last disk watermark warning, ``None`` below it."""

    def start(self) -> None:
        self._task = asyncio.create_task(self._ticker(), name="audit-checkpointer")

    async def cancel(self) -> None:
        """Stop the ticker (waits for it to end)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _ticker(self) -> None:
        """Periodic signed checkpoints (also when idle), recovery probes, disk watermark, retention."""
        interval = self.interval_s
        next_retention = time.monotonic() + interval
        while True:
            healthy = self._healthy()
            delay = interval if healthy else self.retry_interval_s
            elapsed = time.monotonic() - self._last_checkpoint_at()
            await asyncio.sleep(max(0.05, delay - elapsed) if healthy else delay)
            if self._healthy() and time.monotonic() - self._last_checkpoint_at() < interval * 0.95:
                continue
            with contextlib.suppress(AuditError):
                await self._checkpoint()
            await self._check_disk()
            if self._retention is not None and time.monotonic() >= next_retention:
                next_retention = time.monotonic() + self._retention_interval_s
                await self._retention_tick(self._retention)

    async def _check_disk(self) -> None:
        path = self._usage_path()
        if path is not None and self._disk_warn_ratio is not None:
            status = await asyncio.to_thread(check_disk, path, self._disk_warn_ratio)
            self.disk_warning = status.warning

    async def _retention_tick(self, retention: Callable[[], Awaitable[Any]]) -> None:
        try:
            await retention()
        except AuditError as exc:
            log.error("audit_retention_failed", chain=self.chain, error=str(exc))
        except OSError as exc:
            log.error("audit_retention_failed", chain=self.chain, error=exc.strerror or type(exc).__name__)
