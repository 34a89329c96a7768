"""The call core's errors (``RpcError``) as OpenAI error objects with their HTTP status.

Body: ``{"error": {"message", "type", "param", "code"}}`` (OpenAI API reference, "Error
codes"). ``param`` names the OpenAI request field of the first field violation; ``code`` is
the ``ErrorInfo`` reason in lower case (``model_not_found``, ``admission_queue_full``): a value of
the contract's ``xinserve.v1.ErrorReason`` (``openai_code``).
RESOURCE_EXHAUSTED and UNAVAILABLE carry ``Retry-After`` (seconds) from ``RetryInfo``.
Every 401 carries ``WWW-Authenticate: Bearer realm="xinserve"`` (RFC 9110 section 11.6.1),
with ``error="invalid_token"`` when a presented token was refused (RFC 6750 section 3.1).
"""

from __future__ import annotations

import math
from typing import Any

import grpc

from service.core.reasons import Reason
from service.core.status import RpcError
from service.frontends.openai.request_mapping import openai_param

# gRPC status → (HTTP status, OpenAI error type); AIP-193's HTTP mapping of gRPC codes.
_HTTP: dict[grpc.StatusCode, tuple[int, str]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error"),
    grpc.StatusCode.FAILED_PRECONDITION: (400, "invalid_request_error"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_request_error"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "authentication_error"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "permission_error"),
    grpc.StatusCode.NOT_FOUND: (404, "not_found_error"),
    grpc.StatusCode.ALREADY_EXISTS: (409, "conflict_error"),
    grpc.StatusCode.ABORTED: (409, "conflict_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rate_limit_error"),
    grpc.StatusCode.CANCELLED: (499, "cancelled"),
    grpc.StatusCode.UNIMPLEMENTED: (501, "not_implemented_error"),
    grpc.StatusCode.UNAVAILABLE: (503, "service_unavailable_error"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "timeout_error"),
}
_HTTP_BY_REASON: dict[Reason, int] = {
    Reason.REQUEST_TOO_LARGE: 413,
    Reason.METHOD_NOT_ALLOWED: 405,
    Reason.UNSUPPORTED_MEDIA_TYPE: 415,
    Reason.REQUEST_TIMEOUT: 408,
    Reason.REQUEST_BODY_TOO_SLOW: 408,
}
"""Reasons whose HTTP status is not their gRPC code's (all ``invalid_request_error``)."""


def openai_code(reason: Reason) -> str:
    """The OpenAI error object's ``code`` of an ``ErrorInfo`` reason: its name in lower case
    (``Reason.MODEL_NOT_FOUND`` → ``"model_not_found"``)."""
    return reason.lower()


BEARER_REALM = "xinserve"


def http_error(
    err: RpcError, *, chat: bool = False, token_refused: bool = False
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(HTTP status, OpenAI error body, extra headers) for ``err``.

    ``token_refused``: the call presented an ``Authorization`` credential that was refused; a
    401 then challenges with ``error="invalid_token"`` (RFC 6750 section 3.1), otherwise with
    the bare ``Bearer realm`` challenge (no error code for a request without credentials).
    """
    status, kind = _HTTP.get(err.code, (500, "api_error"))
    if err.reason in _HTTP_BY_REASON:
        status, kind = _HTTP_BY_REASON[err.reason], "invalid_request_error"
    param = openai_param(err.violations[0].field, chat) if err.violations else None
    message = err.message
    if err.violations:
        message = "invalid request: " + "; ".join(
            f"{openai_param(v.field, chat)}: {v.description}" for v in err.violations[:5]
        )
    headers: dict[str, str] = {}
    if err.retry_after_s is not None and status in (429, 503):
        headers["retry-after"] = str(max(1, math.ceil(err.retry_after_s)))
    if status == 401:
        challenge = f'Bearer realm="{BEARER_REALM}"'
        if token_refused:
            challenge += ', error="invalid_token"'
        headers["www-authenticate"] = challenge
    body = {"error": {"message": message, "type": kind, "param": param, "code": openai_code(err.reason)}}
    return status, body, headers
