"""The gRPC front end's adapter to the call core, as one grpc.aio server interceptor.

It turns a gRPC call into the core's terms and back: metadata → ``Transport`` (headers,
peer, the TLS auth context), cancellation and deadline → the cancelled status, ``RpcError``
→ ``abort_with_status`` with ``google.rpc`` details. The call's ``CallRecord`` reaches the
servicer explicitly, as ``context.call`` of the ``GrpcCallContext`` it is handed. The call's
request id is returned on every call in the ``x-request-id`` header and trailer metadata.
A request message that does not parse reaches the core as INVALID_ARGUMENT (audited), and
a method no service implements is answered UNIMPLEMENTED (audited). Health and reflection
calls bypass the core.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from service.core.call_context import CallRecord
from service.core.reasons import Reason
from service.core.status import FieldViolation, RpcError, invalid_argument
from service.core.tracing import trace_id_from
from service.operations.validation import REQUEST_ID
from service.pipeline.call_core import CallCore, Started, Transport
from service.settings.auth import TrustedProxySettings

__all__ = ["CallPipeline", "GrpcCallContext", "trace_id_from"]

_OWN_PREFIX = "/xinserve.v1."
_MAX_UNKNOWN_METHOD_CHARS = 256
REQUEST_ID_KEY = "x-request-id"
ADMITTED = frozenset(
    {
        "/xinserve.v1.InferenceService/Generate",
        "/xinserve.v1.InferenceService/GenerateStream",
        "/xinserve.v1.InferenceService/Chat",
        "/xinserve.v1.InferenceService/ChatStream",
        "/xinserve.v1.InferenceService/Embed",
        "/xinserve.v1.InferenceService/Tokenize",
        "/xinserve.v1.InferenceService/Detokenize",
    }
)
"""The inference calls that pass drain and admission (every call that runs engine or
tokenizer work on a client's input; ``Abort`` and the model, server and audit services do not)."""


class _Malformed:
    """Stands in for a request message that did not parse (wire format or UTF-8 errors)."""


MALFORMED = _Malformed()


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """Wrap a request deserializer so that a malformed message reaches the pipeline (which
    answers INVALID_ARGUMENT and audits the call) instead of grpc's UNKNOWN with exception text."""
    if deserializer is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception:  # protobuf DecodeError and friends: the client's bytes are at fault
            return MALFORMED

    return parse


def transport_of(context: grpc.aio.ServicerContext, proxy: TrustedProxySettings | None = None) -> Transport:
    """The call core's view of a gRPC call: text metadata (every value), peer, auth context,
    and the trusted gateway whose listener it arrived on (``proxy``)."""
    headers: dict[str, list[str]] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            headers.setdefault(key, []).append(value)
        else:  # a binary (-bin) value: counted, never read as text
            headers.setdefault(key, [])
    auth = {k: list(v) for k, v in (context.auth_context() or {}).items()}
    return Transport("grpc", context.peer() or "", headers, auth, proxy)


def request_id_metadata(call: CallRecord) -> tuple[tuple[str, str], ...]:
    """The call's request id as response metadata (``x-request-id``); nothing when the record
    holds no valid request id (``validation.REQUEST_ID``), which grpc would refuse to send."""
    rid = call.request_id
    return ((REQUEST_ID_KEY, rid),) if rid and REQUEST_ID.match(rid) else ()


class GrpcCallContext:
    """The ``ServicerContext`` handed to xinserve's servicers: the real one, plus ``call``
    (the call's ``CallRecord``). Every other attribute is the real context's."""

    def __init__(self, context: grpc.aio.ServicerContext, call: CallRecord) -> None:
        self._context = context
        self.call = call
        self._header_sent = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def send_request_id(self) -> None:
        """Send the call's request id as header metadata (once)."""
        if not self._header_sent:
            self._header_sent = True
            await self._context.send_initial_metadata(request_id_metadata(self.call))

    def set_request_id_trailer(self) -> None:
        self._context.set_trailing_metadata(request_id_metadata(self.call))


def _cancel_code(context: grpc.aio.ServicerContext) -> Callable[[], grpc.StatusCode]:
    def code() -> grpc.StatusCode:
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            return grpc.StatusCode.DEADLINE_EXCEEDED
        return grpc.StatusCode.CANCELLED

    return code


def _check_parsed(request: Any) -> None:
    if request is MALFORMED:
        raise invalid_argument(
            [FieldViolation("request", "the request message is malformed (bad wire format or UTF-8)")]
        )


class CallPipeline(grpc.aio.ServerInterceptor):
    """Wraps every xinserve.v1 handler in the call core (see the module docstring).

    Args:
        core: the call core.
        proxy: the trusted gateway this server's listener belongs to, if any.
    """

    def __init__(self, core: CallCore, proxy: TrustedProxySettings | None = None) -> None:
        self._core = core
        self._proxy = proxy

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None:
            return grpc.stream_stream_rpc_method_handler(self._unknown_method(method))
        if not method.startswith(_OWN_PREFIX):
            return handler
        deserializer = _tolerant(handler.request_deserializer)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(method, handler.unary_unary),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(method, handler.unary_stream),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    async def _abort(self, ctx: GrpcCallContext, err: RpcError) -> None:
        with contextlib.suppress(Exception):  # the header cannot go out (call ending): the trailer carries the id
            await ctx.send_request_id()
        await err.abort(ctx._context, trailing=request_id_metadata(ctx.call))

    def _unknown_method(self, method: str):
        """A handler for a method no service implements: UNIMPLEMENTED, audited like any call
        (who probed for what), for every call shape (it never reads the request stream)."""
        shown = method[:_MAX_UNKNOWN_METHOD_CHARS]

        async def refuse(request_iterator: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            started = self._core.begin(shown, transport_of(context, self._proxy))
            err = await self._core.refuse(
                started,
                RpcError(
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"no such method: {shown}",
                    Reason.UNIMPLEMENTED,
                    metadata={"method": shown[:128]},
                ),
            )
            await self._abort(GrpcCallContext(context, started.record), err)
            yield  # unreachable: makes this an async generator, as a stream-stream handler is

        return refuse

    def _start(self, method: str, context: grpc.aio.ServicerContext) -> tuple[Started, GrpcCallContext]:
        started = self._core.begin(method, transport_of(context, self._proxy))
        return started, GrpcCallContext(context, started.record)

    def _wrap_unary(self, method: str, behavior: Callable[..., Awaitable[Any]]):
        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started, ctx = self._start(method, context)
            try:
                async with self._core.run(started, admitted=method in ADMITTED, cancel_code=_cancel_code(context)):
                    _check_parsed(request)
                    response = await behavior(request, ctx)
                    # Inside the call: a header that cannot be sent is the call's outcome.
                    await ctx.send_request_id()
                    ctx.set_request_id_trailer()
            except RpcError as err:
                await self._abort(ctx, err)
                raise AssertionError("unreachable") from None  # abort raises
            return response

        return wrapped

    def _wrap_stream(self, method: str, behavior: Callable[..., AsyncIterator[Any]]):
        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            started, ctx = self._start(method, context)
            try:
                async with self._core.run(started, admitted=method in ADMITTED, cancel_code=_cancel_code(context)):
                    _check_parsed(request)
                    async for item in behavior(request, ctx):
                        await ctx.send_request_id()
                        yield item
                    await ctx.send_request_id()
                    ctx.set_request_id_trailer()
            except RpcError as err:
                await self._abort(ctx, err)
                return

        return wrapped
