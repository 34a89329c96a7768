"""Connection-level bounds of the OpenAI HTTP listeners, enforced before any request is parsed
into an ASGI call (so before authentication).

uvicorn's httptools protocol has no limit on the size of a request head, does not time out a
connection that has not sent a complete head (its keep-alive timer runs only after a response),
and accepts connections until the process runs out of descriptors — at which point gRPC, the
health probe and the audit store (GmSSL reads ``/dev/urandom``) fail with it. ``ConnectionGuard``
holds the rules one listener set shares:

- a request head (request line and headers) larger than ``limits.max_http_header_bytes`` is
  answered ``431 Request Header Fields Too Large`` (RFC 6585) and the connection closed, after
  at most one read chunk more than the limit has been buffered;
- a head that has not arrived in full ``limits.http_header_timeout_s`` after the connection
  opened or the request began is answered ``408 Request Timeout`` and the connection closed;
- at most ``limits.max_http_connections`` connections at once (lowered at start to leave
  ``DESCRIPTOR_RESERVE`` descriptors of ``RLIMIT_NOFILE`` for everything else), and at most
  ``limits.max_http_connections_per_peer`` from one client address; one more is answered
  ``503 Service Unavailable`` with ``Retry-After`` and closed at once.

Refusals are not audited one by one (they precede any call, and an attacker could multiply
them for free): each is counted in ``xinserve_http_connections_refused_total{reason}`` and
logged at most once per ``REFUSAL_LOG_INTERVAL_S`` per reason, with the number refused since.

When ``accept()`` itself fails for want of descriptors or memory (``EMFILE``, ``ENFILE``,
``ENOBUFS``, ``ENOMEM``), asyncio's selector loop retries the listening socket a second later
but reports the failure to the loop's exception handler once per pending connection on every
try (up to the listen backlog each time): ``accept_error_handler`` counts those reports as
refusals of reason ``accept_out_of_resources`` and logs them in the same aggregate way.
"""

from __future__ import annotations

import asyncio
import errno
import json
import resource
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from service.core import metrics
from service.core.logs import REFUSAL_LOG_INTERVAL_S, get_logger
from service.core.reasons import Reason
from service.frontends.openai.errors import openai_code
from service.operations.validation import REQUEST_ID

log = get_logger("xinserve.http")

DESCRIPTOR_RESERVE = 512
"""Descriptors of the process's ``RLIMIT_NOFILE`` the HTTP listeners never take: for gRPC
connections, health probes, the audit store, engines' IPC and model files."""
"""At most one log line per refusal reason in this many seconds."""

HEADER_TOO_LARGE = "header_too_large"
HEADER_TIMEOUT = "header_timeout"
CONNECTION_LIMIT = "connection_limit"
PEER_CONNECTION_LIMIT = "peer_connection_limit"
ACCEPT_OUT_OF_RESOURCES = "accept_out_of_resources"

_ACCEPT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def raise_nofile_soft_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (as servers commonly do at start);
    returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def connection_cap(configured: int, nofile_soft: int) -> int:
    """The global connection cap in force: ``configured``, lowered so that
    ``DESCRIPTOR_RESERVE`` descriptors stay free (at least 1)."""
    return max(1, min(configured, nofile_soft - DESCRIPTOR_RESERVE))


def response_request_id(given: list[str] | tuple[str, ...]) -> str:
    """The ``x-request-id`` of a response: the first of the client's ``given`` values when it is
    a valid request id (``service.operations.validation.REQUEST_ID``, the rule calls follow), else a new
    one (32 hex digits)."""
    first = given[0] if given else None
    return first if first and REQUEST_ID.match(first) else uuid.uuid4().hex


def plain_response(status: int, phrase: str, reason: Reason, message: str, request_id: str, extra: str = "") -> bytes:
    """A complete HTTP/1.1 response with an OpenAI error object (``{"error": {"message",
    "type", "param", "code"}}``, ``application/json``, ``code`` from ``reason`` as
    ``errors.openai_code`` derives it) and ``x-request-id: request_id`` (printable ASCII,
    ``response_request_id``), closing the connection."""
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": openai_code(reason)}
    body = json.dumps({"error": error})
    data = body.encode("utf-8")
    head = (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n"
        f"x-request-id: {request_id}\r\nconnection: close\r\n{extra}\r\n"
    )
    return head.encode("ascii") + data


def bad_request(request_id: str) -> bytes:
    """The response to bytes that are not an HTTP/1.1 request (400, ``invalid_http_request``)."""
    return plain_response(
        400, "Bad Request", Reason.INVALID_HTTP_REQUEST, "the request is not valid HTTP/1.1", request_id
    )


@dataclass
class ConnectionGuard:
    """The connection bounds shared by the listeners of one ``HttpFrontend``.

    Args:
        max_header_bytes: largest request head (bytes).
        header_timeout_s: seconds a request head may take to arrive.
        max_connections: connections at once, all listeners (already lowered by
            ``connection_cap``).
        max_per_peer: connections at once from one client address.
    """

    max_header_bytes: int
    header_timeout_s: float
    max_connections: int
    max_per_peer: int
    open_by_peer: Counter[str] = field(default_factory=Counter)
    total: int = 0
    _last_log: dict[str, float] = field(default_factory=dict)
    _unlogged: Counter[str] = field(default_factory=Counter)

    def admit(self, peer: str) -> str | None:
        """Count a new connection from ``peer``; returns None, or the refusal reason (the
        connection is then not counted)."""
        if self.total >= self.max_connections:
            self.refused(CONNECTION_LIMIT)
            return CONNECTION_LIMIT
        if self.open_by_peer[peer] >= self.max_per_peer:
            self.refused(PEER_CONNECTION_LIMIT)
            return PEER_CONNECTION_LIMIT
        self.total += 1
        self.open_by_peer[peer] += 1
        return None

    def release(self, peer: str) -> None:
        """A counted connection from ``peer`` closed."""
        self.total -= 1
        self.open_by_peer[peer] -= 1
        if self.open_by_peer[peer] <= 0:
            del self.open_by_peer[peer]

    def refused(self, reason: str) -> None:
        """Count a refusal and log it, at most once per ``REFUSAL_LOG_INTERVAL_S`` per reason."""
        metrics.HTTP_CONNECTIONS_REFUSED.labels(reason).inc()
        now = time.monotonic()
        self._unlogged[reason] += 1
        if now - self._last_log.get(reason, -REFUSAL_LOG_INTERVAL_S) >= REFUSAL_LOG_INTERVAL_S:
            log.warning("http_connections_refused", reason=reason, count=self._unlogged.pop(reason))
            self._last_log[reason] = now

    @staticmethod
    def refusal(reason: str, request_id: str) -> bytes:
        """The response that ends a refused connection, with ``x-request-id: request_id``."""
        if reason == HEADER_TOO_LARGE:
            return plain_response(
                431,
                "Request Header Fields Too Large",
                Reason.REQUEST_HEADER_FIELDS_TOO_LARGE,
                "the request line and headers are too large",
                request_id,
            )
        if reason == HEADER_TIMEOUT:
            return plain_response(
                408, "Request Timeout", Reason.REQUEST_TIMEOUT, "the request headers took too long", request_id
            )
        return plain_response(
            503,
            "Service Unavailable",
            Reason.TOO_MANY_CONNECTIONS,
            "too many connections; retry later",
            request_id,
            "retry-after: 1\r\n",
        )


ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]


def accept_error_handler(guard: ConnectionGuard, previous: ExceptionHandler | None) -> ExceptionHandler:
    """A loop exception handler (``loop.set_exception_handler``) that turns asyncio's
    ``socket.accept() out of system resource`` reports into ``guard.refused``
    (``accept_out_of_resources``: counted, logged at most once per ``REFUSAL_LOG_INTERVAL_S``) and
    passes every other report to ``previous`` (or the loop's default handler)."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _ACCEPT_ERRNOS and "socket" in context:
            guard.refused(ACCEPT_OUT_OF_RESOURCES)
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    return handle
