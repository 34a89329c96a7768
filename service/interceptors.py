"""The call pipeline for xinserve's own services, as one grpc.aio server interceptor.

Steps, in the order of ARCHITECTURE.md's request path:
request id (``x-request-id``) and W3C trace context (``traceparent``) → authentication
(mTLS subject or bearer token → principal) → authorization (role per service) →
[audit begin: added by the audit issue] → drain check → admission control (inference
calls only). Around the servicer it maps errors to gRPC status (``RpcError``; engine
errors; anything unexpected becomes INTERNAL without its text) and records metrics and
one structured log line per call. Health and reflection calls bypass it.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import grpc
import structlog

from engine_backends.errors import EngineError
from service import metrics
from service.auth import AuthenticationFailed, Authenticator
from service.call_context import CallInfo, Principal, current_call
from service.logs import get_logger
from service.runtime import Runtime
from service.status import FieldViolation, RpcError, from_engine_error, invalid_argument
from service.validation import REQUEST_ID, REQUEST_ID_RULE

log = get_logger("xinserve.call")

_OWN_PREFIX = "/xinserve.v1."
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
_MAX_UNKNOWN_METHOD_CHARS = 256
# Roles allowed per service; "*" = any authenticated (or anonymous, if auth is optional) caller.
_ROLES: dict[str, frozenset[str]] = {
    "xinserve.v1.InferenceService": frozenset({"user", "admin"}),
    "xinserve.v1.ModelService": frozenset({"user", "admin", "auditor"}),
    "xinserve.v1.ServerService": frozenset({"user", "admin", "auditor"}),
    "xinserve.v1.AuditService": frozenset({"auditor"}),
}
# Services an anonymous caller may never use, even when authentication is optional.
_NO_ANONYMOUS = frozenset({"xinserve.v1.AuditService"})
_ADMITTED = frozenset(
    {
        "/xinserve.v1.InferenceService/Generate",
        "/xinserve.v1.InferenceService/GenerateStream",
        "/xinserve.v1.InferenceService/Chat",
        "/xinserve.v1.InferenceService/ChatStream",
        "/xinserve.v1.InferenceService/Embed",
    }
)


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


def _metadata(context: grpc.aio.ServicerContext) -> tuple[dict[str, str], dict[str, int]]:
    """The text metadata (first value per key) and how often each key came."""
    out: dict[str, str] = {}
    counts: dict[str, int] = {}
    for item in context.invocation_metadata() or ():
        key, value = item
        counts[key] = counts.get(key, 0) + 1
        if isinstance(value, str) and key not in out:
            out[key] = value
    return out, counts


def trace_id_from(traceparent: str | None) -> str | None:
    """The trace id of a W3C Trace Context ``traceparent`` header (version 00 layout; version
    ``ff`` and all-zero ids are invalid, W3C Trace Context §3.2.2), or None if absent or invalid."""
    if not traceparent:
        return None
    m = _TRACEPARENT.match(traceparent.strip().lower())
    if not m or m.group(1) == "ff" or m.group(2) == "0" * 32 or m.group(3) == "0" * 16:
        return None
    return m.group(2)


class CallPipeline(grpc.aio.ServerInterceptor):
    """Wraps every xinserve.v1 handler with the pipeline steps above."""

    def __init__(self, runtime: Runtime, authenticator: Authenticator) -> None:
        self._runtime = runtime
        self._auth = authenticator

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

    # -- steps -------------------------------------------------------------------------

    def _identify(self, method: str, context: grpc.aio.ServicerContext) -> tuple[CallInfo, bool]:
        """Start the call's record: request id, trace id, peer, then who is calling. Returns
        the call and whether its ``x-request-id`` (if sent) is valid; a generated id replaces
        an absent or invalid one.

        Raises:
            RpcError: UNAUTHENTICATED (the call's principal then says which credential failed).
        """
        md, counts = _metadata(context)
        authorizations = counts.get("authorization", 0)
        rid = md.get("x-request-id")
        info = CallInfo(
            method=method,
            peer=context.peer() or "",
            request_id=rid if rid and REQUEST_ID.match(rid) else uuid.uuid4().hex,
            trace_id=trace_id_from(md.get("traceparent")),
        )
        current_call.set(info)
        structlog.contextvars.bind_contextvars(request_id=info.request_id, trace_id=info.trace_id)
        try:
            if authorizations > 1:
                raise AuthenticationFailed("more than one authorization header")
            auth_context = {k: list(v) for k, v in (context.auth_context() or {}).items()}
            info.principal = self._auth.authenticate(md.get("authorization"), auth_context)
        except AuthenticationFailed as exc:
            if authorizations:  # a token was presented and refused: not the same as no credentials
                info.principal = Principal("", "token", frozenset())
            raise RpcError(grpc.StatusCode.UNAUTHENTICATED, str(exc), "UNAUTHENTICATED") from None
        return info, rid is None or (info.request_id == rid and counts.get("x-request-id", 0) == 1)

    async def _enter(self, method: str, context: grpc.aio.ServicerContext, stack: AsyncExitStack) -> CallInfo:
        info, request_id_ok = self._identify(method, context)
        service = method[1:].split("/", 1)[0]
        allowed = _ROLES.get(service, frozenset())
        if info.principal.auth_method == "anonymous" and service in _NO_ANONYMOUS:
            raise RpcError(
                grpc.StatusCode.UNAUTHENTICATED, f"{service} needs an authenticated auditor", "UNAUTHENTICATED"
            )
        if info.principal.auth_method != "anonymous" and not (info.principal.roles & allowed):
            raise RpcError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"principal lacks a role for {service} (needs one of {', '.join(sorted(allowed))})",
                "PERMISSION_DENIED",
            )
        if not request_id_ok:
            raise invalid_argument([FieldViolation("x-request-id", REQUEST_ID_RULE)])
        if method in _ADMITTED:
            if self._runtime.audit is not None:
                self._runtime.audit.check_writable()
            if self._runtime.draining:
                raise RpcError(
                    grpc.StatusCode.UNAVAILABLE,
                    "server is draining; retry on another replica",
                    "DRAINING",
                    retry_after_s=1.0,
                )
            await stack.enter_async_context(self._runtime.admission.admit())
        metrics.IN_FLIGHT.set(self._runtime.admission.in_flight)
        metrics.QUEUE_LENGTH.set(self._runtime.admission.queued)
        return info

    @staticmethod
    def _check_parsed(request: Any) -> None:
        if request is MALFORMED:
            raise invalid_argument(
                [FieldViolation("request", "the request message is malformed (bad wire format or UTF-8)")]
            )

    async def _complete(self, info: CallInfo, code: grpc.StatusCode, message: str | None = None) -> None:
        """Metrics, the call's log line, and its audit record (durable before the call completes).

        Once per call: a cancellation that arrives while the outcome is being recorded (the
        client gave up just as the call finished) adds nothing.

        Raises:
            RpcError: UNAVAILABLE when the audit record cannot be written (fail-closed).
        """
        if info.completed:
            return
        info.completed = True
        self._observe(info, code, message)
        if self._runtime.audit is not None:
            await self._runtime.audit.record_call(info, code)

    def _observe(self, info: CallInfo, code: grpc.StatusCode, message: str | None) -> None:
        elapsed = time.monotonic() - info.started
        # A method name the client made up must not become a metric label (unbounded series).
        short = info.method.rsplit("/", 1)[-1] if code != grpc.StatusCode.UNIMPLEMENTED else "unknown"
        metrics.REQUESTS.labels(short, code.name).inc()
        metrics.REQUEST_DURATION.labels(short).observe(elapsed)
        metrics.IN_FLIGHT.set(self._runtime.admission.in_flight)
        metrics.QUEUE_LENGTH.set(self._runtime.admission.queued)
        log.info(
            "rpc",
            method=short,
            code=code.name,
            duration_ms=round(elapsed * 1000, 2),
            principal=info.principal.name,
            auth=info.principal.auth_method,
            peer=info.peer,
            model=info.model,
            request_id=info.request_id,
            prompt_tokens=info.prompt_tokens,
            completion_tokens=info.completion_tokens,
            **({"error": message} if message else {}),
        )
        structlog.contextvars.clear_contextvars()

    @staticmethod
    def _to_rpc_error(exc: BaseException, info: CallInfo) -> RpcError:
        if isinstance(exc, RpcError):
            return exc
        if isinstance(exc, EngineError):
            return from_engine_error(exc)
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f"{tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}" if tb else "?"
        # Type and place only: exception text may carry prompt content.
        log.error("unexpected_error", method=info.method, error=type(exc).__name__, where=where)
        return RpcError(grpc.StatusCode.INTERNAL, "internal error", "INTERNAL")

    @staticmethod
    def _cancel_code(context: grpc.aio.ServicerContext) -> grpc.StatusCode:
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            return grpc.StatusCode.DEADLINE_EXCEEDED
        return grpc.StatusCode.CANCELLED

    async def _cancelled(self, method: str, context: grpc.aio.ServicerContext) -> None:
        """Record a call the client cancelled (or whose deadline passed); the client is gone."""
        info = current_call.get() or CallInfo(method, "", None, None)
        try:
            await asyncio.shield(self._complete(info, self._cancel_code(context)))
        except (RpcError, asyncio.CancelledError):
            pass  # nobody to tell; the audit log already reported its own failure

    async def _succeeded(self, info: CallInfo) -> RpcError | None:
        """Complete a successful call; the error to send instead if its audit record failed."""
        try:
            await self._complete(info, grpc.StatusCode.OK)
        except RpcError as audit_err:
            return audit_err
        return None

    async def _failed(self, method: str, exc: BaseException, context: grpc.aio.ServicerContext) -> RpcError:
        info = current_call.get() or CallInfo(method, "", None, None)
        err = self._to_rpc_error(exc, info)
        try:
            await self._complete(info, err.code, err.message if err.code != grpc.StatusCode.INTERNAL else None)
        except RpcError as audit_err:
            return audit_err
        return err

    def _unknown_method(self, method: str):
        """A handler for a method no service implements: UNIMPLEMENTED, audited like any call
        (who probed for what), for every call shape (it never reads the request stream)."""
        shown = method[:_MAX_UNKNOWN_METHOD_CHARS]

        async def refuse(request_iterator: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                info, _ = self._identify(shown, context)
                err = RpcError(grpc.StatusCode.UNIMPLEMENTED, f"no such method: {shown}", "UNIMPLEMENTED")
            except RpcError as refused:
                info, err = current_call.get() or CallInfo(shown, "", None, None), refused
            try:
                await self._complete(info, err.code, err.message)
            except RpcError as audit_err:
                err = audit_err
            await err.abort(context)
            yield  # unreachable: makes this an async generator, as a stream-stream handler is

        return refuse

    def _wrap_unary(self, method: str, behavior: Callable[..., Awaitable[Any]]):
        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
            async with AsyncExitStack() as stack:
                try:
                    info = await self._enter(method, context, stack)
                    self._check_parsed(request)
                    response = await behavior(request, context)
                    await stack.aclose()  # release admission before the audit write
                    err = await self._succeeded(info)
                    if err is None:
                        return response
                except asyncio.CancelledError:
                    await self._cancelled(method, context)
                    raise
                except Exception as exc:
                    await stack.aclose()
                    err = await self._failed(method, exc, context)
            await err.abort(context)
            raise AssertionError("unreachable")  # abort raises

        return wrapped

    def _wrap_stream(self, method: str, behavior: Callable[..., AsyncIterator[Any]]):
        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async with AsyncExitStack() as stack:
                try:
                    info = await self._enter(method, context, stack)
                    self._check_parsed(request)
                    async for item in behavior(request, context):
                        yield item
                    await stack.aclose()
                    err = await self._succeeded(info)
                    if err is None:
                        return
                except (asyncio.CancelledError, GeneratorExit):
                    await self._cancelled(method, context)
                    raise
                except Exception as exc:
                    await stack.aclose()
                    err = await self._failed(method, exc, context)
            await err.abort(context)

        return wrapped
