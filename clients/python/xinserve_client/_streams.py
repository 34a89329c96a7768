"""The response streams of server-streaming calls: :class:`ResponseStream` (blocking, over a
``grpc`` call) and :class:`AsyncResponseStream` (asyncio, over a ``grpc.aio`` call)."""

from __future__ import annotations

import asyncio
import types
from typing import Any, Generic, TypeVar

import grpc
import grpc.aio

from .errors import from_rpc_error

T = TypeVar("T")


class ResponseStream(Generic[T]):
    """An iterator over the messages of a server-streaming call.

    Iterate it (``for msg in stream``) to receive messages as they arrive. ``close()`` —
    also called on leaving a ``with`` block and when the object is garbage-collected —
    cancels the RPC, which makes the server abort the engine request at once; iteration then
    simply ends (no exception). A server or transport error raises a
    :class:`~xinserve_client.XinserveError` subclass from ``next()``.

    Attributes:
        request_id: the request id sent as ``x-request-id`` (None if none was sent).
    """

    def __init__(self, call: Any, request_id: str | None) -> None:
        self._call = call
        self._closed = False
        self.request_id = request_id

    def __iter__(self) -> ResponseStream[T]:
        return self

    def __next__(self) -> T:
        if self._closed:
            raise StopIteration
        try:
            return next(self._call)  # type: ignore[no-any-return]
        except grpc.RpcError as exc:
            if self._closed:
                raise StopIteration from None
            raise from_rpc_error(exc, self.request_id) from None

    def close(self) -> None:
        """Cancel the call (idempotent; a no-op once the stream has ended)."""
        self._closed = True
        self._call.cancel()

    cancel = close

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._closed

    def __enter__(self) -> ResponseStream[T]:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed:
                self._call.cancel()
        except Exception:  # noqa: S110 - interpreter shutdown
            pass


def _task_is_cancelling() -> bool:
    """Whether the running task has a cancellation request pending (``Task.cancelling()``,
    Python >= 3.11). Python 3.10 has no such count: False there, so a stream closed from
    another task ends its iteration even if its reader was also cancelled."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is not None and cancelling() > 0


class AsyncResponseStream(Generic[T]):
    """An async iterator over the messages of a server-streaming call.

    ``async for msg in stream`` receives messages as they arrive. ``aclose()`` (or the
    synchronous ``close()``), leaving an ``async with`` block, or garbage collection cancels
    the RPC, which makes the server abort the engine request at once; iteration then simply
    ends. Breaking out of ``async for`` alone does NOT cancel: use ``async with`` or call
    ``aclose()``. Server and transport errors raise :class:`~xinserve_client.XinserveError`
    subclasses from ``__anext__``.

    Attributes:
        request_id: the request id sent as ``x-request-id`` (None if none was sent).
    """

    def __init__(self, call: Any, request_id: str | None) -> None:
        self._call = call
        self._closed = False
        self.request_id = request_id

    def __aiter__(self) -> AsyncResponseStream[T]:
        return self

    async def __anext__(self) -> T:
        if self._closed:
            raise StopAsyncIteration
        try:
            message = await self._call.read()
        except grpc.RpcError as exc:
            if self._closed:
                raise StopAsyncIteration from None
            raise from_rpc_error(exc, self.request_id) from None
        except asyncio.CancelledError:
            if self._closed and not _task_is_cancelling():
                # grpc.aio reports a call closed from another task as CancelledError in the
                # reader; that is the end of the stream, not a cancellation of this task.
                raise StopAsyncIteration from None
            self._call.cancel()
            raise
        if message is grpc.aio.EOF:
            raise StopAsyncIteration
        return message  # type: ignore[no-any-return]

    def close(self) -> None:
        """Cancel the call (idempotent; a no-op once the stream has ended)."""
        self._closed = True
        self._call.cancel()

    cancel = close

    async def aclose(self) -> None:
        """Cancel the call (idempotent)."""
        self.close()

    @property
    def closed(self) -> bool:
        """True once close()/aclose() was called."""
        return self._closed

    async def __aenter__(self) -> AsyncResponseStream[T]:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed and not self._call.done():
                self._call.cancel()
        except Exception:  # noqa: S110 - loop already closed
            pass
