"""Admission control: at most ``max_in_flight`` inference calls run, at most ``max_queue`` wait.

Past both, a call is refused at once with RESOURCE_EXHAUSTED and a RetryInfo delay, so
clients back off instead of piling up (the request path's last interceptor step). Request
bodies the HTTP front end receives before admitting their calls are bounded apart
(``service.core.body_reception``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from service.core.reasons import Reason
from service.core.status import RpcError


class Admission:
    """Counts running and queued calls. All methods run on the event loop (no locks needed)."""

    def __init__(self, max_in_flight: int, max_queue: int, retry_after_s: float) -> None:
        self.max_in_flight = max_in_flight
        self.max_queue = max_queue
        self.retry_after_s = retry_after_s
        self._slots = asyncio.Semaphore(max_in_flight)
        self.in_flight = 0
        self.queued = 0

    @asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        """Hold a slot for the duration of the call.

        Raises:
            RpcError: RESOURCE_EXHAUSTED with RetryInfo when the queue is full.
        """
        if self._slots.locked():
            if self.queued >= self.max_queue:
                raise RpcError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"server busy: {self.in_flight} calls running and {self.queued} queued; retry later",
                    Reason.ADMISSION_QUEUE_FULL,
                    retry_after_s=self.retry_after_s,
                    metadata={"in_flight": str(self.in_flight), "queued": str(self.queued)},
                )
            self.queued += 1
            try:
                await self._slots.acquire()
            finally:
                self.queued -= 1
        else:
            await self._slots.acquire()
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            self._slots.release()
