"""The transport-neutral call core: every call of every front end passes through it once.

Steps, each owned by one module:

1. ``begin``: the call's record: request id (``x-request-id``, else generated), W3C trace
   context (``service.core.tracing``), peer, then identity (``service.access.auth``: bearer token or
   client certificate → ``Principal``).
2. ``run`` (an async context manager around the operation): authorization
   (``service.access.policy``), request-id validity, then for inference calls the audit store's
   health, drain and admission (``service.core.admission``); after the operation, whatever its
   end (success, error, cancellation), one audit record (``service.core.audit_trail``), metrics
   (``service.core.metrics``) and one log line. Errors leave as ``RpcError`` (engine errors mapped
   by ``service.core.status``; anything unexpected becomes INTERNAL without its text).

Front ends (``service.frontends.grpc.interceptors`` for gRPC, ``service.frontends.openai.routes`` for HTTP) turn their
transport's request, metadata, cancellation and errors into these and back, nothing else.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import grpc
import structlog

from audit import EventType
from engine_backends.errors import EngineDeadError, EngineError
from service.access.auth import AuthenticationFailed, Authenticator, ForwardedClient, certificate_identity
from service.access.login_throttle import GLOBAL, Lockout, LoginThrottle, certificate_key, peer_host, token_key
from service.access.policy import AccessPolicy
from service.access.xfcc import HEADER as XFCC_HEADER
from service.access.xfcc import XfccError, nearest_client
from service.core import metrics
from service.core.call_context import CallRecord, Principal
from service.core.logs import get_logger
from service.core.reasons import Reason
from service.core.status import FieldViolation, RpcError, from_engine_error, invalid_argument
from service.core.tracing import trace_context
from service.operations.validation import REQUEST_ID, REQUEST_ID_RULE
from service.runtime.state import Runtime
from service.settings.auth import TrustedProxySettings

log = get_logger("xinserve.call")


@dataclass(frozen=True)
class Transport:
    """What a front end knows about a call before running it.

    Attributes:
        front_end: ``grpc`` or ``openai`` (the metrics label).
        peer: the peer address as the transport renders it.
        headers: lower-case header/metadata name -> every text value sent, in order.
        auth_context: ``{"x509_pem_cert": [PEM]}`` when the TLS layer verified a client
            certificate (gRPC's auth context layout), else empty.
        proxy: the trusted gateway whose listener the call arrived on (``auth.trusted_proxies``):
            its ``x-forwarded-client-cert`` names the caller. None on every other listener,
            where that header is refused.
    """

    front_end: str
    peer: str
    headers: Mapping[str, Sequence[str]]
    auth_context: Mapping[str, Sequence[bytes]]
    proxy: TrustedProxySettings | None = None


@dataclass(frozen=True)
class Started:
    """A begun call: its record and, if identity or request-id checks failed, the refusal
    that ``run`` raises (after authorization, so the audit record shows who was refused)."""

    record: CallRecord
    refusal: RpcError | None
    request_id_ok: bool


def _credential_keys(authorization: str, certificate: tuple[str | None, str | None]) -> list[str]:
    """The per-principal throttle keys of a call presenting a token: the token's and, with a
    client certificate, the certificate's (``service.access.login_throttle``)."""
    keys = [token_key(authorization), certificate_key(*certificate)]
    return [k for k in keys if k is not None]


def _stopped_by_drain() -> RpcError:
    return RpcError(
        grpc.StatusCode.UNAVAILABLE,
        "the server stopped this call at the end of its drain; retry on another replica",
        Reason.DRAINING,
        retry_after_s=1.0,
    )


class CallCore:
    """Identity → authorization → drain and admission → operation → record, metrics, log.

    Args:
        runtime: shared state (models, admission, drain, audit trail).
        authenticator: tokens and client certificates → principal.
        policy: role → methods/models.
        throttle: failed-login lockouts (default: from ``runtime.settings.auth``).
    """

    def __init__(
        self,
        runtime: Runtime,
        authenticator: Authenticator,
        policy: AccessPolicy,
        throttle: LoginThrottle | None = None,
    ) -> None:
        self.runtime = runtime
        self.authenticator = authenticator
        self.policy = policy
        auth = runtime.settings.auth
        self.throttle = throttle or LoginThrottle(
            auth.max_failed_logins,
            auth.failed_login_window_s,
            auth.lockout_s,
            max_principal_failures=auth.max_failed_logins_per_principal,
            max_global_failures=auth.max_failed_logins_global,
            global_lockout_s=auth.global_lockout_s,
        )
        # Lockouts started by failed logins, with the peer host of the call that started
        # each; audited once each by the next call to complete.
        self._lockouts: list[tuple[Lockout, str]] = []
        # Tasks running an admitted call, and those of them stopped by ``stop_running``.
        self._running: set[asyncio.Task] = set()
        self._stopping: set[asyncio.Task] = set()

    # -- 1: the record and identity ------------------------------------------------------

    def begin(self, method: str, transport: Transport) -> Started:
        """Create the call's record and identify the caller (never raises)."""
        headers = transport.headers
        first = {k: v[0] for k, v in headers.items() if v}
        rids = headers.get("x-request-id", ())
        rid = rids[0] if rids else None
        trace_id, trace_headers = trace_context(first)
        record = CallRecord(
            method=method,
            peer=transport.peer,
            request_id=rid if rid and REQUEST_ID.match(rid) else uuid.uuid4().hex,
            trace_id=trace_id,
            front_end=transport.front_end,
            trace_headers=trace_headers,
        )
        structlog.contextvars.bind_contextvars(request_id=record.request_id, trace_id=record.trace_id)
        request_id_ok = rid is None or (record.request_id == rid and len(rids) == 1)
        # Without a token file there is no token to check: a presented Authorization header is
        # ignored on every front end (OpenAI SDKs always send an API key; vLLM's server ignores it
        # without --api-key), and the caller is identified by its certificate or as anonymous.
        authorizations = headers.get("authorization", ()) if self.authenticator.tokens else ()
        peer_key = f"peer:{peer_host(transport.peer)}"
        refusal: RpcError | None = None
        forwarded, xfcc_refusal = self._forwarded(record, transport)
        auth_context = {} if transport.proxy is not None else {k: list(v) for k, v in transport.auth_context.items()}

        def cert_identity() -> tuple[str | None, str | None]:
            if forwarded is not None:
                return forwarded.fingerprint, forwarded.subject
            return certificate_identity(auth_context)

        try:
            if authorizations:  # a peer's lockout throttles token guessing, not certificate or anonymous calls
                self.throttle.check(GLOBAL, peer_key, *_credential_keys(authorizations[0], cert_identity()))
            if len(authorizations) > 1:
                raise AuthenticationFailed("more than one authorization header")
            record.principal = self.authenticator.authenticate(
                authorizations[0] if authorizations else None, auth_context, forwarded
            )
            if record.principal.auth_method != "anonymous":
                self.throttle.check(f"principal:{record.principal.name}")
                self.throttle.succeeded(peer_key)
        except AuthenticationFailed as exc:
            if authorizations:  # a token was presented and refused: not the same as no credentials
                record.principal = Principal(exc.principal or "", "token", frozenset(), *cert_identity())
                keys = [GLOBAL, peer_key, *_credential_keys(authorizations[0], cert_identity())]
                if exc.principal:
                    keys.append(f"principal:{exc.principal}")
                host = peer_host(transport.peer)
                self._lockouts.extend((lockout, host) for lockout in self.throttle.failed(*keys))
            refusal = RpcError(grpc.StatusCode.UNAUTHENTICATED, str(exc), Reason.UNAUTHENTICATED)
        except RpcError as throttled:
            if authorizations and record.principal.auth_method == "anonymous":
                record.principal = Principal("", "token", frozenset(), *cert_identity())
            refusal = throttled
        return Started(record, xfcc_refusal or refusal, request_id_ok)

    @staticmethod
    def _forwarded(record: CallRecord, transport: Transport) -> tuple[ForwardedClient | None, RpcError | None]:
        """The client identity a trusted gateway forwarded (``x-forwarded-client-cert``), or the
        refusal of that header: malformed or missing on a trusted-proxy listener, present on
        any other. The gateway's own identity goes into the record's detail (``proxy``,
        ``proxy_listener``, ``xfcc_by``); a refused header is marked ``xfcc_refused``."""
        values = transport.headers.get(XFCC_HEADER, ())
        proxy = transport.proxy
        if proxy is None:
            if XFCC_HEADER not in transport.headers:
                return None, None
            record.audit_detail["xfcc_refused"] = True
            message = f"{XFCC_HEADER} is accepted only on a trusted-proxy listener"
            return None, RpcError(grpc.StatusCode.UNAUTHENTICATED, message, Reason.UNAUTHENTICATED)
        record.audit_detail.update(proxy=proxy.name, proxy_listener=proxy.listen)
        try:
            client, element = nearest_client(values)
        except XfccError as exc:
            record.audit_detail["xfcc_refused"] = True
            return None, RpcError(grpc.StatusCode.UNAUTHENTICATED, str(exc), Reason.UNAUTHENTICATED)
        if element.by is not None:
            record.audit_detail["xfcc_by"] = element.by[:256]
        return client, None

    # -- 2: around the operation -----------------------------------------------------------

    @asynccontextmanager
    async def run(
        self, started: Started, *, admitted: bool, cancel_code: Callable[[], grpc.StatusCode]
    ) -> AsyncIterator[CallRecord]:
        """Check, admit, run the body, then record the outcome exactly once.

        Args:
            started: from ``begin``.
            admitted: an inference call (audit store health, drain and admission apply).
            cancel_code: the status of a call cancelled from outside (CANCELLED, or
                DEADLINE_EXCEEDED when its deadline passed).

        Raises:
            RpcError: the call's error status (also when the audit record of a successful
                call could not be written: UNAVAILABLE under ``fail_closed``).
            asyncio.CancelledError, GeneratorExit: re-raised after the cancellation is recorded.
        """
        record = started.record
        err: RpcError | None = None
        task = asyncio.current_task()
        async with AsyncExitStack() as stack:
            try:
                await self._enter(started, admitted, stack)
                if admitted and task is not None:
                    self._running.add(task)
                    stack.callback(self._running.discard, task)
                yield record
                await stack.aclose()  # release admission before the audit write
            except asyncio.CancelledError:
                await stack.aclose()
                if task is None or task not in self._stopping:
                    await self._cancelled(record, cancel_code())
                    raise
                # Stopped by the server at the end of the drain grace: the client is still
                # there and gets UNAVAILABLE with the DRAINING reason.
                self._stopping.discard(task)
                if sys.version_info >= (3, 11):  # 3.10 counts no cancellations
                    task.uncancel()
                err = await self._failed(record, _stopped_by_drain())
            except GeneratorExit:
                await stack.aclose()
                await self._cancelled(record, cancel_code())
                raise
            except Exception as exc:
                await stack.aclose()
                err = await self._failed(record, exc)
        if err is not None:
            raise err
        await self.complete(record, grpc.StatusCode.OK)

    async def stop_running(self, timeout_s: float = 10.0) -> None:
        """End every admitted call still running (the drain grace is over): each is cancelled
        and answered UNAVAILABLE with ErrorInfo reason ``DRAINING`` (its engine request is
        aborted, its audit record written). Waits up to ``timeout_s`` seconds for them."""
        tasks = [t for t in self._running if not t.done()]
        for task in tasks:
            self._stopping.add(task)
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)

    async def refuse(self, started: Started, err: RpcError) -> RpcError:
        """Record a call refused before any operation ran (e.g. an unknown method); the
        error to send (the audit failure instead, if the record could not be written)."""
        refusal = started.refusal or err
        try:
            await self.complete(started.record, refusal.code, refusal.message)
        except RpcError as audit_err:
            return audit_err
        return refusal

    async def _enter(self, started: Started, admitted: bool, stack: AsyncExitStack) -> None:
        record = started.record
        if started.refusal is not None:
            raise started.refusal
        self.policy.authorize(record.principal, record.method)
        if not started.request_id_ok:
            raise invalid_argument([FieldViolation("x-request-id", REQUEST_ID_RULE)])
        runtime = self.runtime
        if admitted:
            if runtime.audit is not None:
                runtime.audit.check_writable()
            if runtime.draining:
                raise RpcError(
                    grpc.StatusCode.UNAVAILABLE,
                    "server is draining; retry on another replica",
                    Reason.DRAINING,
                    retry_after_s=1.0,
                )
            await stack.enter_async_context(runtime.admission.admit())
        metrics.IN_FLIGHT.set(runtime.admission.in_flight)
        metrics.QUEUE_LENGTH.set(runtime.admission.queued)

    # -- 3: the outcome ----------------------------------------------------------------------

    async def complete(self, record: CallRecord, code: grpc.StatusCode, message: str | None = None) -> None:
        """Metrics, the call's log line, and its audit record (durable before the call completes).

        Once per call: a cancellation that arrives while the outcome is being recorded (the
        client gave up just as the call finished) adds nothing.

        Raises:
            RpcError: UNAVAILABLE when the audit record cannot be written (fail-closed).
        """
        if record.completed:
            return
        record.completed = True
        self._observe(record, code, message)
        try:
            if self.runtime.audit is not None and record.audited:
                await self.runtime.audit.record_call(record, code)
        finally:
            if self._lockouts:
                await self._record_lockouts()

    async def _record_lockouts(self) -> None:
        """One ``login_lockout`` audit event (and warning log line) per lockout started: its
        scope (``peer``, ``principal``, ``certificate``, ``token``, ``global``), what is
        locked (the host, principal or certificate name; never a token's digest), the peer
        whose failure started it, the failures, window and lockout in milliseconds."""
        lockouts, self._lockouts = self._lockouts, []
        for lockout, host in lockouts:
            locked = lockout.key.partition(":")[2] if lockout.scope in ("peer", "principal", "certificate") else None
            detail = {
                "scope": lockout.scope,
                "locked": locked,
                "peer": host,
                "failures": lockout.failures,
                "window_ms": round(lockout.window_s * 1000),
                "lockout_ms": round(lockout.lockout_s * 1000),
            }
            log.warning("login_lockout", **detail)
            if self.runtime.audit is not None:
                await self.runtime.audit.event(EventType.LOGIN_LOCKOUT, "RESOURCE_EXHAUSTED", **detail)

    def _observe(self, record: CallRecord, code: grpc.StatusCode, message: str | None) -> None:
        elapsed = time.monotonic() - record.started
        # A method name the client made up must not become a metric label (unbounded series).
        short = record.method.rsplit("/", 1)[-1] if code != grpc.StatusCode.UNIMPLEMENTED else "unknown"
        metrics.REQUESTS.labels(short, code.name, record.front_end).inc()
        metrics.REQUEST_DURATION.labels(short, record.front_end).observe(elapsed)
        metrics.IN_FLIGHT.set(self.runtime.admission.in_flight)
        metrics.QUEUE_LENGTH.set(self.runtime.admission.queued)
        log.info(
            "rpc",
            method=short,
            front_end=record.front_end,
            code=code.name,
            duration_ms=round(elapsed * 1000, 2),
            principal=record.principal.name,
            auth=record.principal.auth_method,
            peer=record.peer,
            model=record.model,
            request_id=record.request_id,
            prompt_tokens=record.prompt_tokens,
            completion_tokens=record.completion_tokens,
            **({"error": message} if message else {}),
        )
        structlog.contextvars.clear_contextvars()

    @staticmethod
    def to_rpc_error(exc: BaseException, record: CallRecord) -> RpcError:
        """The status for an exception out of an operation (unexpected ones: INTERNAL, logged
        by type and place only, since exception text may carry prompt content)."""
        if isinstance(exc, RpcError):
            return exc
        if isinstance(exc, EngineError):
            return from_engine_error(exc)
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f"{tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}" if tb else "?"
        log.error("unexpected_error", method=record.method, error=type(exc).__name__, where=where)
        return RpcError(grpc.StatusCode.INTERNAL, "internal error", Reason.INTERNAL)

    async def _cancelled(self, record: CallRecord, code: grpc.StatusCode) -> None:
        """Record a call the client cancelled (or whose deadline passed); the client is gone."""
        try:
            await asyncio.shield(self.complete(record, code))
        except (RpcError, asyncio.CancelledError):
            pass  # nobody to tell; the audit log already reported its own failure

    async def _failed(self, record: CallRecord, exc: BaseException) -> RpcError:
        died = self.runtime.engine_died
        if isinstance(exc, EngineDeadError) and record.model and died is not None:
            await died(record.model)
        err = self.to_rpc_error(exc, record)
        adapter = err.metadata.get("lora_adapter")
        if adapter is not None:  # a refused adapter is named in the record, as a served one is
            record.audit_detail.setdefault("lora_adapter", adapter)
        try:
            await self.complete(record, err.code, err.message if err.code != grpc.StatusCode.INTERNAL else None)
        except RpcError as audit_err:
            return audit_err
        return err
