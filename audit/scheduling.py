"""Scheduled work of ``AuditLog``: periodic signed checkpoints (also when idle), recovery
probes while the store is down, the disk watermark, and automatic retention."""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog

from audit.chain import CheckpointKind
from audit.errors import AuditError
from audit.writer import LogCore

log = structlog.get_logger("xinserve.audit")


class Scheduling(LogCore):
    """``AuditLog``'s ticker."""

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
