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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import grpc
import structlog

from engine_backends.errors import EngineError
from service import metrics
from service.auth import AuthenticationFailed, Authenticator
from service.call_context import CallInfo, current_call
from service.logs import get_logger
from service.runtime import Runtime
from service.status import FieldViolation, RpcError, from_engine_error, invalid_argument
from service.validation import REQUEST_ID

log = get_logger("xinserve.call")

_OWN_PREFIX = "/xinserve.v1."
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")
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


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in context.invocation_metadata() or ():
        key, value = item
        if isinstance(value, str) and key not in out:
            out[key] = value
    return out


def trace_id_from(traceparent: str | None) -> str | None:
    """The trace id of a W3C ``traceparent`` header, or None if absent or malformed."""
    if not traceparent:
        return None
    m = _TRACEPARENT.match(traceparent.strip().lower())
    if not m or m.group(1) == "0" * 32:
        return None
    return m.group(1)


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
        if handler is None or not method.startswith(_OWN_PREFIX):
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

    async def _enter(self, method: str, context: grpc.aio.ServicerContext, stack: AsyncExitStack) -> CallInfo:
        md = _metadata(context)
        rid = md.get("x-request-id")
        info = CallInfo(
            method=method,
            peer=context.peer() or "",
            request_id=rid if rid and REQUEST_ID.match(rid) else None,
            trace_id=trace_id_from(md.get("traceparent")),
            sent_request_id=rid,
        )
        current_call.set(info)
        structlog.contextvars.bind_contextvars(request_id=info.request_id, trace_id=info.trace_id)
        try:
            auth_context = {k: list(v) for k, v in (context.auth_context() or {}).items()}
            info.principal = self._auth.authenticate(md.get("authorization"), auth_context)
        except AuthenticationFailed as exc:
            raise RpcError(grpc.StatusCode.UNAUTHENTICATED, str(exc), "UNAUTHENTICATED") from None
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

        Raises:
            RpcError: UNAVAILABLE when the audit record cannot be written (fail-closed).
        """
        self._observe(info, code, message)
        if self._runtime.audit is not None:
            await self._runtime.audit.record_call(info, code)

    def _observe(self, info: CallInfo, code: grpc.StatusCode, message: str | None) -> None:
        elapsed = time.monotonic() - info.started
        short = info.method.rsplit("/", 1)[-1]
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
