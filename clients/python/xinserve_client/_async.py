"""The asyncio client, over ``grpc.aio``. Its calls are ``_AsyncCalls`` (``_async_calls.py``),
from which the blocking client's are generated."""

from __future__ import annotations

from typing import Any

import grpc.aio

from ._async_calls import _AsyncCalls
from ._streams import AsyncResponseStream

__all__ = ["AsyncResponseStream", "AsyncXinserveClient"]


class AsyncXinserveClient(_AsyncCalls):
    """asyncio client for an xinserve server (over ``grpc.aio``).

    Example::

        async with AsyncXinserveClient("127.0.0.1:50051") as client:
            reply = await client.generate("xinserve-tiny-llama", "Hello", max_tokens=16, temperature=0.0)
            print(reply.outputs[0].text)
            async with client.generate_stream("xinserve-tiny-llama", "Hello", max_tokens=64) as stream:
                async for delta in stream:
                    print(delta.text, end="", flush=True)

    Create it inside a running event loop and use it from that loop only. Methods are
    coroutines except ``generate_stream``/``chat_stream``, which return an
    :class:`AsyncResponseStream` at once (the call starts then).

    Results are the generated ``xinserve.v1`` messages (``GenerateResponse``, ``EmbedResponse``,
    ...) except where a method says otherwise. Every failed call raises a subclass of
    :class:`~xinserve_client.XinserveError`; raw ``grpc.RpcError`` never escapes. Calling a
    method after :meth:`close` raises ``RuntimeError``. Cancelling the awaiting task cancels
    the RPC and raises ``asyncio.CancelledError`` as usual.

    The constructor's arguments (target, TLS, token, timeouts, ...) and the ValueError it
    raises are documented on ``__init__``, shared with :class:`XinserveClient`.
    """

    def _new_channel(self) -> Any:
        cfg = self._config
        if cfg.credentials is not None:
            return grpc.aio.secure_channel(cfg.target, cfg.credentials, options=cfg.options)
        return grpc.aio.insecure_channel(cfg.target, options=cfg.options)

    async def close(self, grace: float | None = None) -> None:
        """Close the channel; calls still in flight are cancelled (after ``grace`` seconds,
        if given). Idempotent."""
        if not self._closed:
            self._closed = True
            await self._channel.close(grace)
