"""Typed exceptions raised by the xinserve clients.

Every failed call raises a subclass of :class:`XinserveError`; raw ``grpc.RpcError`` never
leaves the public API. The class is chosen by the gRPC status code; the rich
``google.rpc.Status`` details the server attaches (``grpc-status-details-bin`` trailer) are
decoded into attributes:

=====================  ===========================  =====================================
status code            class                        extra attributes
=====================  ===========================  =====================================
INVALID_ARGUMENT       InvalidArgumentError         ``field_violations`` (BadRequest)
NOT_FOUND              NotFoundError
RESOURCE_EXHAUSTED     ResourceExhaustedError       ``retry_after`` (RetryInfo, seconds)
UNAVAILABLE            UnavailableError             ``retry_after`` when the server sent it
DEADLINE_EXCEEDED      DeadlineExceededError
CANCELLED              CancelledError
UNAUTHENTICATED        UnauthenticatedError
PERMISSION_DENIED      PermissionDeniedError
FAILED_PRECONDITION    FailedPreconditionError
anything else          XinserveError
=====================  ===========================  =====================================

:attr:`XinserveError.error_reason` reads the ``ErrorInfo`` reason as a value of the contract's
``xinserve.v1.ErrorReason`` enum (``proto/xinserve/v1/errors.proto``, re-exported here as
:data:`ErrorReason`; on the wire the reason is the value's name without ``ERROR_REASON_``)::

    except NotFoundError as err:
        if err.error_reason == ErrorReason.ERROR_REASON_MODEL_NOT_FOUND:
            ...

:class:`CancelledError` is the *server's* CANCELLED status. It is unrelated to
``asyncio.CancelledError``, which the asyncio client lets propagate untouched when the
awaiting task itself is cancelled.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from xinserve.v1.errors_pb2 import ErrorReason

__all__ = [
    "DOMAIN",
    "CancelledError",
    "DeadlineExceededError",
    "ErrorReason",
    "FailedPreconditionError",
    "IncompatibleServerError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "UnavailableError",
    "XinserveError",
    "from_rpc_error",
]

_DETAILS_KEY = "grpc-status-details-bin"

DOMAIN = "xinserve.io"
"""``ErrorInfo.domain`` of the reasons an xinserve server sends."""

_REASON_PREFIX = "ERROR_REASON_"

_DETAIL_TYPES: tuple[Any, ...] = (
    error_details_pb2.BadRequest,
    error_details_pb2.RetryInfo,
    error_details_pb2.ErrorInfo,
    error_details_pb2.RequestInfo,
    error_details_pb2.ResourceInfo,
    error_details_pb2.QuotaFailure,
    error_details_pb2.PreconditionFailure,
    error_details_pb2.LocalizedMessage,
    error_details_pb2.Help,
    error_details_pb2.DebugInfo,
)


class XinserveError(Exception):
    """A call to an xinserve server failed.

    Attributes:
        code: the gRPC status code (``grpc.StatusCode``).
        message: the server's status message (never a stack trace).
        request_id: the request id of the failed call: the one the server reported in
            ``google.rpc.RequestInfo`` / ``ErrorInfo.metadata["request_id"]`` / the
            ``x-request-id`` trailer, else the one the client sent; None if unknown.
        reason: ``google.rpc.ErrorInfo.reason`` when present (a stable UPPER_SNAKE id, e.g.
            ``"MODEL_NOT_FOUND"``); :attr:`error_reason` is the same as an ``ErrorReason``.
        domain: ``google.rpc.ErrorInfo.domain`` when present (``"xinserve.io"``).
        error_metadata: ``google.rpc.ErrorInfo.metadata`` (empty dict when absent); the keys
            each reason carries are listed in ``proto/xinserve/v1/errors.proto``.
        details: every decoded ``google.rpc`` detail message, in the server's order.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        request_id: str | None = None,
        details: Iterable[Any] = (),
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.request_id = request_id
        self.details: list[Any] = list(details)
        self.reason: str | None = None
        self.domain: str | None = None
        self.error_metadata: dict[str, str] = {}
        for detail in self.details:
            if isinstance(detail, error_details_pb2.ErrorInfo):
                self.reason = detail.reason or None
                self.domain = detail.domain or None
                self.error_metadata = dict(detail.metadata)

    @property
    def error_reason(self) -> int | None:
        """The reason as an ``ErrorReason`` value (e.g. ``ErrorReason.ERROR_REASON_MODEL_NOT_FOUND``),
        or None: no ``ErrorInfo``, another domain than ``xinserve.io``, or a reason this client's
        contract does not list (a newer server; :attr:`reason` still holds its name)."""
        if self.reason is None or self.domain != DOMAIN:
            return None
        try:
            value = int(ErrorReason.Value(_REASON_PREFIX + self.reason))
        except ValueError:
            return None
        return value or None

    @property
    def code_name(self) -> str:
        """The status code's name, e.g. ``"INVALID_ARGUMENT"``."""
        return str(self.code.name)

    def __str__(self) -> str:
        text = f"{self.code_name}: {self.message}" if self.message else self.code_name
        extra = self._extra()
        if extra:
            text = f"{text} ({extra})"
        if self.request_id:
            text = f"{text} [request_id={self.request_id}]"
        return text

    def _extra(self) -> str:
        return ""

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(code={self.code_name}, message={self.message!r}, request_id={self.request_id!r})"


class InvalidArgumentError(XinserveError):
    """INVALID_ARGUMENT: the request was malformed.

    Attributes:
        field_violations: ``[(field, description), ...]`` from ``google.rpc.BadRequest``,
            e.g. ``[("sampling_params.temperature", "must be >= 0")]``; all of them at once.
    """

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.field_violations: list[tuple[str, str]] = []
        for detail in self.details:
            if isinstance(detail, error_details_pb2.BadRequest):
                self.field_violations.extend((v.field, v.description) for v in detail.field_violations)

    def _extra(self) -> str:
        return "; ".join(f"{field}: {desc}" for field, desc in self.field_violations)


class NotFoundError(XinserveError):
    """NOT_FOUND: unknown model, LoRA adapter or other named resource."""

    code = grpc.StatusCode.NOT_FOUND


class _RetryableMixin(XinserveError):
    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after: float | None = None
        for detail in self.details:
            if isinstance(detail, error_details_pb2.RetryInfo) and detail.HasField("retry_delay"):
                delay = detail.retry_delay
                self.retry_after = delay.seconds + delay.nanos / 1e9

    def _extra(self) -> str:
        return f"retry after {self.retry_after:g} s" if self.retry_after is not None else ""


class ResourceExhaustedError(_RetryableMixin):
    """RESOURCE_EXHAUSTED: the server's admission queue is full.

    Attributes:
        retry_after: seconds the server suggests waiting before retrying
            (``google.rpc.RetryInfo.retry_delay``), or None if it gave none.
    """

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnavailableError(_RetryableMixin):
    """UNAVAILABLE: the server cannot be reached, or is starting or draining.

    Attributes:
        retry_after: seconds to wait before retrying when the server sent RetryInfo, else None.
    """

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(XinserveError):
    """DEADLINE_EXCEEDED: the call's timeout expired (the server aborts the request)."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class CancelledError(XinserveError):
    """CANCELLED: the call was cancelled (by the server, or aborted through ``Abort``).

    Not raised when the caller itself closes a stream: closing simply ends iteration.
    """

    code = grpc.StatusCode.CANCELLED


class UnauthenticatedError(XinserveError):
    """UNAUTHENTICATED: missing or wrong bearer token or client certificate."""

    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDeniedError(XinserveError):
    """PERMISSION_DENIED: the authenticated principal may not make this call."""

    code = grpc.StatusCode.PERMISSION_DENIED


class FailedPreconditionError(XinserveError):
    """FAILED_PRECONDITION: e.g. the model cannot be served (failed verification, wrong kind)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class IncompatibleServerError(FailedPreconditionError):
    """Raised by ``check_compatibility()`` (client side, no RPC status): the server's
    ``min_client_revision`` is newer than this client's schema revision."""


_BY_CODE: dict[grpc.StatusCode, type[XinserveError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        ResourceExhaustedError,
        UnavailableError,
        DeadlineExceededError,
        CancelledError,
        UnauthenticatedError,
        PermissionDeniedError,
        FailedPreconditionError,
    )
}


def _unpack(detail: any_pb2.Any) -> Any:
    for msg_type in _DETAIL_TYPES:
        if detail.Is(msg_type.DESCRIPTOR):
            msg = msg_type()
            detail.Unpack(msg)
            return msg
    return detail


def _rich_status(err: Any) -> tuple[status_pb2.Status | None, list[tuple[str, Any]]]:
    """The google.rpc.Status in the trailers (as grpc_status.rpc_status.from_call reads it)."""
    trailers: list[tuple[str, Any]] = []
    try:
        raw = err.trailing_metadata()
        if raw is not None:
            trailers = [(str(k), v) for k, v in raw]
    except Exception:
        trailers = []
    if isinstance(err, grpc.Call):
        try:
            from grpc_status import rpc_status

            return rpc_status.from_call(err), trailers
        except (ValueError, ImportError):
            pass  # code/message mismatch: fall back to a lenient read below
        except Exception:  # noqa: S110
            pass
    for key, value in trailers:
        if key == _DETAILS_KEY and isinstance(value, bytes):
            try:
                return status_pb2.Status.FromString(value), trailers
            except Exception:
                return None, trailers
    return None, trailers


def from_rpc_error(err: Any, request_id: str | None = None) -> XinserveError:
    """Convert a ``grpc.RpcError`` (sync) or ``grpc.aio.AioRpcError`` into a typed exception.

    Args:
        err: the gRPC error (anything with ``code()``, ``details()`` and
            ``trailing_metadata()``).
        request_id: the request id the client sent, used when the server reported none.

    Returns:
        The :class:`XinserveError` subclass for the status code, with decoded details.
    """
    try:
        code = err.code()
    except Exception:
        code = None
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    try:
        message = err.details() or ""
    except Exception:
        message = ""
    status, trailers = _rich_status(err)
    details = [_unpack(d) for d in status.details] if status is not None else []
    if status is not None and status.message and not message:
        message = status.message
    server_request_id: str | None = None
    for detail in details:
        if isinstance(detail, error_details_pb2.RequestInfo) and detail.request_id:
            server_request_id = detail.request_id
        elif isinstance(detail, error_details_pb2.ErrorInfo) and detail.metadata.get("request_id"):
            server_request_id = server_request_id or detail.metadata["request_id"]
    if server_request_id is None:
        for key, value in trailers:
            if key == "x-request-id" and isinstance(value, str) and value:
                server_request_id = value
                break
    cls = _BY_CODE.get(code, XinserveError)
    return cls(message, code=code, request_id=server_request_id or request_id, details=details)
