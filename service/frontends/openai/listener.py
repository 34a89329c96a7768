"""The OpenAI-compatible HTTP front end's listeners: uvicorn servers in the server's own
event loop, over the same call core (engines, admission, audit) as gRPC.

``listen.http`` listeners are plaintext (loopback only unless
``listen.allow_insecure_remote``); ``listen.https`` listeners use ``tls.cert_file`` and
``tls.key_file``, and with ``tls.client_ca_file`` require a client certificate from that CA
(mTLS), whose subject becomes the principal exactly as on gRPC. Sockets are bound here, so
a port in use fails at start and port 0 picks a free one (``ports``).

A TLS handshake the server refuses (no client certificate, a certificate from another CA,
an expired one) never reaches the call core: it is counted in
``xinserve_tls_handshake_failures_total{front_end="openai",reason}`` (``reason``: OpenSSL's,
e.g. ``certificate_verify_failed``, ``peer_did_not_return_a_certificate``) and logged as
``tls_handshake_refused``. The peer address is not known there: Python's ``ssl.SSLObject``,
which asyncio drives for the handshake, has no link to the connection's transport.

Before a request becomes a call, each connection is bounded (``service.frontends.openai.connections``):
request-head size (431), time to send a head (408), connections in all and per client address
(503); refusals are counted and logged in aggregate, not audited one by one. Those replies, and
the 400 for bytes that are not HTTP/1.1, are OpenAI error objects with an ``x-request-id`` (the
client's when the head read so far carries a valid one, else a new one).

A request asking to switch protocols (``Upgrade: h2c``, as the JDK's ``HttpClient`` and
``curl --http2`` send on ``http://`` URLs) is served as the HTTP/1.1 request it also is,
body included, and the connection stays HTTP/1.1: RFC 9110 section 7.8 lets a server
ignore ``Upgrade``.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.core import metrics
from service.core.listen_probe import ListenError, http_socket, listen_error
from service.core.logs import get_logger
from service.core.tls_material import load_tls_material
from service.frontends.openai.connections import (
    HEADER_TIMEOUT,
    HEADER_TOO_LARGE,
    ConnectionGuard,
    ExceptionHandler,
    accept_error_handler,
    bad_request,
    connection_cap,
    raise_nofile_soft_limit,
    response_request_id,
)
from service.frontends.openai.routes import CLIENT_CERT_STATE, OpenAIRoutes
from service.operations.inference import Inference
from service.pipeline.call_core import CallCore
from service.settings.config import Settings

log = get_logger("xinserve.http")


class _ObservedSSLObject(ssl.SSLObject):
    """``ssl.SSLObject`` (set as the context's ``sslobject_class``) that counts and logs a
    handshake the server refuses; the handshake itself is OpenSSL's, unchanged."""

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as exc:
            reason = (exc.reason or type(exc).__name__).lower()
            metrics.TLS_HANDSHAKE_FAILURES.labels("openai", reason).inc()
            log.warning("tls_handshake_refused", front_end="openai", reason=reason)
            raise


_FRAMING_HEADERS = (b"content-length", b"transfer-encoding")


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head past the limit (already refused)."""


class _ClientCertProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (httptools), plus:

    - the verified client certificate (PEM) of a TLS connection in each request's
      ``scope["state"]`` (uvicorn copies ``app_state`` into it);
    - a request with an ``Upgrade`` other than ``websocket`` is served with its body.
      httptools (llhttp) treats everything after such a request's head as the new
      protocol's bytes: it ends the message without a body and stops parsing. Here those
      bytes are parsed further as the request's body, framed by its own ``Content-Length``
      or ``Transfer-Encoding`` (a fresh parser reads a head made of just those headers,
      whose callbacks are skipped, then the rest), and the connection goes on as HTTP/1.1.
    """

    _skipping_head = False
    """True while the fresh parser reads the framing-only head (its callbacks do nothing)."""
    guard: ConnectionGuard
    """The listeners' connection bounds (``service.frontends.openai.connections``); set per front end."""
    _peer = ""
    _counted = False
    _refused = False
    _in_head = True
    _head_bytes = 0
    _head_parsed = 0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._peer = self.client[0] if self.client else ""
        reason = self.guard.admit(self._peer)
        if reason is not None:
            self._refuse(reason, counted=False)
            return
        self._counted = True
        self._arm_head_timer()
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if der:
            self.app_state = {**self.app_state, CLIENT_CERT_STATE: ssl.DER_cert_to_PEM_cert(der).encode("ascii")}

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        if self._counted:
            self._counted = False
            self.guard.release(self._peer)
        super().connection_lost(exc)

    def _refuse(self, reason: str, counted: bool = True) -> None:
        """End the connection with ``reason``'s response (``ConnectionGuard.refusal``)."""
        if counted:
            self.guard.refused(reason)
        self._refused = True
        self._cancel_head_timer()
        if not self.transport.is_closing():
            self.transport.write(ConnectionGuard.refusal(reason, self._request_id()))
            self.transport.close()

    def _request_id(self) -> str:
        """The ``x-request-id`` of a reply written here: the client's, if the head parsed so
        far carries a valid one, else a new one (``response_request_id``)."""
        given = [value.decode("latin-1") for name, value in self.headers or () if name == b"x-request-id"]
        return response_request_id(given)

    def send_400_response(self, msg: str) -> None:
        """Answer bytes httptools cannot parse as HTTP/1.1 with an OpenAI error object (400,
        ``invalid_http_request``) and an ``x-request-id``, then close the connection (as uvicorn
        does, which answers in plain text)."""
        if not self.transport.is_closing():
            self.transport.write(bad_request(self._request_id()))
            self.transport.close()

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.guard.header_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and (self.cycle is None or self.cycle.response_complete):
            self._refuse(HEADER_TIMEOUT)

    def _ignoring_upgrade(self) -> bool:
        """The request being parsed asks for an upgrade that is not served (not websocket)."""
        return bool(self.parser.should_upgrade()) and not self._should_upgrade()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self._unset_keepalive_if_required()
        if self._in_head:
            self._head_bytes += len(data)
        while True:
            try:
                self.parser.feed_data(data)
                if self._in_head and self._head_bytes > self.guard.max_header_bytes and not self._refused:
                    self._refuse(HEADER_TOO_LARGE)
                return
            except _HeadTooLarge:
                return
            except httptools.HttpParserUpgrade as upgrade:
                if self._should_upgrade():
                    self.handle_websocket_upgrade()
                    return
                data = self._parse_body_next() + data[upgrade.args[0] :]
            except httptools.HttpParserError:
                if self._refused:  # a callback refused the head (httptools wraps its exception)
                    return
                msg = "Invalid HTTP request received."
                self.logger.warning(msg)
                self.send_400_response(msg)
                return

    def _parse_body_next(self) -> bytes:
        """Replace the stopped parser by a fresh one; returns the head to feed it first: the
        upgrade request's framing headers only (its callbacks are skipped)."""
        self.parser = httptools.HttpRequestParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self._skipping_head = True
        framing = b"".join(name + b": " + value + b"\r\n" for name, value in self.headers if name in _FRAMING_HEADERS)
        return b"POST / HTTP/1.1\r\n" + framing + b"\r\n"

    def on_message_begin(self) -> None:
        if not self._skipping_head:
            if not self._in_head:  # the next request on a kept-alive connection
                self._in_head = True
                self._head_bytes = 0
                self._arm_head_timer()
            super().on_message_begin()

    def _count_head(self, size: int) -> None:
        """Count ``size`` bytes of the parsed head; past the limit, refuse and stop parsing
        (a head that arrives in one read is parsed before ``data_received`` could count it)."""
        self._head_parsed += size
        if self._head_parsed > self.guard.max_header_bytes:
            self._refuse(HEADER_TOO_LARGE)
            raise _HeadTooLarge

    def on_url(self, url: bytes) -> None:
        if not self._skipping_head:
            self._count_head(len(url))
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._skipping_head:
            self._count_head(len(name) + len(value) + 4)
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._skipping_head:
            self._skipping_head = False
        else:
            self._in_head = False
            self._head_parsed = 0
            self._cancel_head_timer()
            super().on_headers_complete()

    def on_message_complete(self) -> None:
        # The upgrade request's head ends its message at once; its body comes after.
        if not self._ignoring_upgrade():
            super().on_message_complete()


def _bind(address: str, setting: str) -> socket.socket:
    """A listening, non-blocking socket on ``address`` (``listen_probe.http_socket``).

    Raises:
        ListenError: the address cannot be bound.
    """
    try:
        sock = http_socket(address)
    except OSError as exc:
        raise listen_error(address, setting, exc) from None
    try:
        sock.listen(2048)  # with SO_REUSEADDR, a port another bound socket took fails here
    except OSError as exc:
        sock.close()
        raise listen_error(address, setting, exc) from None
    sock.setblocking(False)
    return sock


class HttpFrontend:
    """The ``listen.http`` and ``listen.https`` listeners.

    Args:
        core: the call core shared with the gRPC front end.
        inference: the inference operations shared with it.
        settings: listeners, TLS files, ``limits.max_http_body_bytes`` and
            ``limits.http_body_timeout_s``.

    Raises:
        TlsMaterialError: with ``listen.https``, a TLS file cannot be read, is not PEM of its
            kind, or the key does not match the certificate (checked before anything binds).
        ListenError: a listener cannot bind (port in use, address not available); the
            listeners bound before it are closed.
    """

    def __init__(self, core: CallCore, inference: Inference, settings: Settings) -> None:
        if settings.listen.https:
            load_tls_material(settings.tls)
        limits = settings.limits
        self.app = OpenAIRoutes(core, inference, limits.max_http_body_bytes, limits.http_body_timeout_s).app()
        self.guard = ConnectionGuard(
            max_header_bytes=limits.max_http_header_bytes,
            header_timeout_s=limits.http_header_timeout_s,
            max_connections=connection_cap(limits.max_http_connections, raise_nofile_soft_limit()),
            max_per_peer=limits.max_http_connections_per_peer,
        )
        protocol = type("_GuardedProtocol", (_ClientCertProtocol,), {"guard": self.guard})
        self.ports: dict[str, int] = {}
        self._servers: list[tuple[uvicorn.Server, list[socket.socket]]] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._previous_handler: ExceptionHandler | None = None
        listeners = [(a, False) for a in settings.listen.http] + [(a, True) for a in settings.listen.https]
        for address, secure in listeners:
            try:
                sock = _bind(address, "listen.https" if secure else "listen.http")
            except ListenError:
                for _, bound in self._servers:
                    for s in bound:
                        s.close()
                raise
            self.ports[address] = sock.getsockname()[1]
            options: dict[str, Any] = {}
            if secure:
                tls = settings.tls
                options = {"ssl_certfile": str(tls.cert_file), "ssl_keyfile": str(tls.key_file)}
                if tls.client_ca_file is not None:
                    options |= {"ssl_ca_certs": str(tls.client_ca_file), "ssl_cert_reqs": ssl.CERT_REQUIRED}
            config = uvicorn.Config(
                self.app,
                lifespan="off",
                log_config=None,
                access_log=False,
                http=protocol,
                timeout_graceful_shutdown=1,
                server_header=False,
                **options,
            )
            self._servers.append((uvicorn.Server(config), [sock]))

    async def start(self) -> None:
        """Start serving every listener (returns once they accept connections). Accept failures
        for want of descriptors are counted and logged in aggregate (``accept_error_handler``)
        while the listeners run."""
        loop = asyncio.get_running_loop()
        self._previous_handler = loop.get_exception_handler()
        loop.set_exception_handler(accept_error_handler(self.guard, self._previous_handler))
        for server, sockets in self._servers:
            server.config.load()
            if server.config.ssl is not None:
                server.config.ssl.sslobject_class = _ObservedSSLObject
            server.lifespan = server.config.lifespan_class(server.config)
            await server.startup(sockets=sockets)
            self._tasks.append(asyncio.create_task(server.main_loop()))

    async def stop(self) -> None:
        """Stop listening; calls still running after a second are cancelled (which aborts
        their engine requests)."""
        for server, _ in self._servers:
            server.should_exit = True
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server, sockets in self._servers:
            if server.started:
                await server.shutdown(sockets=sockets)
        asyncio.get_running_loop().set_exception_handler(self._previous_handler)
