"""Server-sent event streams (the WHATWG HTML ``text/event-stream`` format, as OpenAI streams
replies) and the client's disconnect, which cancels the work of its call."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import grpc
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from service.core.reasons import Reason
from service.core.status import RpcError


async def until_disconnect(receive: Receive) -> None:
    """Return when the ASGI ``receive`` channel reports ``http.disconnect``."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


_T = TypeVar("_T")


async def unless_disconnected(request: Request, work: Awaitable[_T]) -> _T:
    """Run ``work`` in its own task (after the body was read); if the client disconnects
    first, cancel it (which aborts its engine request), wait for its cleanup and raise
    CANCELLED.

    Raises:
        RpcError: CANCELLED when the client went away.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(until_disconnect(request.receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise RpcError(grpc.StatusCode.CANCELLED, "the client disconnected", Reason.CLIENT_DISCONNECTED)
    return task.result()


class EventStream(Response):
    """A ``text/event-stream`` response whose producer runs in its own task, cancelled (once,
    so that its cleanup can abort the engine request) when the client disconnects."""

    media_type = "text/event-stream"

    def __init__(self, first: str, rest: AsyncIterator[str], headers: dict[str, str]) -> None:
        super().__init__(None, 200, {**headers, "cache-control": "no-cache"}, self.media_type)
        # Streamed with chunked encoding: no Content-Length (Response adds "0" for no content).
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self._first = first
        self._rest = rest

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def produce() -> None:
            try:
                await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                await send({"type": "http.response.body", "body": self._first.encode(), "more_body": True})
                async for event in self._rest:
                    await send({"type": "http.response.body", "body": event.encode(), "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                # Cancelled or failed while sending: close the call now (recorded as cancelled,
                # engine request aborted) instead of whenever the generator is collected.
                with contextlib.suppress(Exception):
                    await self._rest.aclose()  # type: ignore[attr-defined]

        producer = asyncio.ensure_future(produce())
        watcher = asyncio.ensure_future(until_disconnect(receive))
        try:
            await asyncio.wait({producer, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not producer.done():
                producer.cancel()
            watcher.cancel()
            await asyncio.gather(producer, watcher, return_exceptions=True)


def sse_data(data: Any) -> str:
    """One ``data:`` event holding ``data`` as compact JSON (UTF-8, not ASCII-escaped)."""
    return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


def sse_event(event: dict[str, Any]) -> str:
    """A Responses stream event: ``event: <type>`` and its JSON ``data`` (no ``[DONE]`` follows)."""
    return f"event: {event['type']}\n{sse_data(event)}"
