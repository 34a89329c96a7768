"""The blocking client, over ``grpc`` (sync). Its calls are ``_SyncCalls``, generated from the
asyncio client's (``_async_calls.py``)."""

from __future__ import annotations

from typing import Any

import grpc

from ._common import DEFAULT, Timeout
from ._streams import ResponseStream
from ._sync_calls import _SyncCalls

__all__ = ["ResponseStream", "XinserveClient"]


class XinserveClient(_SyncCalls):
    """Blocking client for an xinserve server.

    Example::

        with XinserveClient("127.0.0.1:50051") as client:
            reply = client.generate("xinserve-tiny-llama", "Hello", max_tokens=16, temperature=0.0)
            print(reply.outputs[0].text)
            with client.generate_stream("xinserve-tiny-llama", "Hello", max_tokens=64) as stream:
                for delta in stream:
                    print(delta.text, end="", flush=True)

    Results are the generated ``xinserve.v1`` messages (``GenerateResponse``, ``EmbedResponse``,
    ...) except where a method says otherwise. Every failed call raises a subclass of
    :class:`~xinserve_client.XinserveError`; raw ``grpc.RpcError`` never escapes. Calling a
    method after :meth:`close` raises ``RuntimeError``. ``generate_stream``/``chat_stream``
    return a :class:`ResponseStream`.

    The constructor's arguments (target, TLS, token, timeouts, ...) and the ValueError it
    raises are documented on ``__init__``, shared with :class:`AsyncXinserveClient`.
    """

    def _new_channel(self) -> Any:
        cfg = self._config
        if cfg.credentials is not None:
            return grpc.secure_channel(cfg.target, cfg.credentials, options=cfg.options)
        return grpc.insecure_channel(cfg.target, options=cfg.options)

    def close(self) -> None:
        """Close the channel, cancelling any call still in flight. Idempotent."""
        if not self._closed:
            self._closed = True
            self._channel.close()

    def attestation(self, nonce: bytes | None = None, *, timeout: Timeout = DEFAULT) -> Any:
        """TEE evidence bound to this TLS channel and the served models (``GetAttestation``).

        Returns an :class:`xinserve_client.attestation.Attestation`; check it with its ``binds``
        and a :class:`~xinserve_client.attestation.Verifier`. ``nonce`` defaults to 32 random bytes.
        Raises FailedPreconditionError (no TEE, or not over TLS), InvalidArgumentError (nonce
        outside 16..64 bytes).
        """
        from .attestation import attestation

        return attestation(self, nonce, timeout=timeout)
