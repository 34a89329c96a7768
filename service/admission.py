"""Admission control: at most ``max_in_flight`` inference calls run, at most ``max_queue`` wait.

Past both, a call is refused at once with RESOURCE_EXHAUSTED and a RetryInfo delay, so
clients back off instead of piling up (the request path's last interceptor step). Request
bodies the HTTP front end receives before admitting their calls are counted apart
(``receiving``), bounded by as many as admission can hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import grpc

from service.status import RpcError


class Admission:
    """Counts running and queued calls. All methods run on the event loop (no locks needed)."""

    def __init__(self, max_in_flight: int, max_queue: int, retry_after_s: float) -> None:
        self.max_in_flight = max_in_flight
        self.max_queue = max_queue
        self.retry_after_s = retry_after_s
        self._slots = asyncio.Semaphore(max_in_flight)
        self.in_flight = 0
        self.queued = 0
        self.receiving_bodies = 0

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
                    "ADMISSION_QUEUE_FULL",
                    retry_after_s=self.retry_after_s,
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

    @contextmanager
    def receiving(self) -> Iterator[None]:
        """Count one request body being received before its call is admitted (the HTTP front
        end reads a body first, so that a slow client holds no admission slot). At most
        ``max_in_flight + max_queue`` bodies at once, as many calls as admission can hold, so
        the memory of bodies buffered before admission stays bounded by that many times
        ``limits.max_http_body_bytes``.

        Raises:
            RpcError: RESOURCE_EXHAUSTED (reason ``BODY_RECEPTION_FULL``) with RetryInfo when
                that many bodies are being received.
        """
        if self.receiving_bodies >= self.max_in_flight + self.max_queue:
            raise RpcError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"server busy: {self.receiving_bodies} request bodies being received; retry later",
                "BODY_RECEPTION_FULL",
                retry_after_s=self.retry_after_s,
            )
        self.receiving_bodies += 1
        try:
            yield
        finally:
            self.receiving_bodies -= 1
