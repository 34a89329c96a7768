"""Check, before the engine is imported, that every configured listener address can be bound.

``xinserve serve`` imports vLLM and torch (seconds, minutes on a loaded host) before its
listeners bind. ``probe_listeners`` binds a socket to each configured address the way that
address's listener will bind it, closes it again, and raises ``ListenError`` for the first
address that cannot be bound, so that a busy port refuses the start at once (exit 3).

The probe is racy by nature: a port free now may be taken before the listener binds it, and
one taken now may be freed by then. The listeners therefore keep their own check
(``service.frontends.grpc.server.Frontend``, ``service.frontends.openai.listener.HttpFrontend``,
``service.lifecycle.server.start_metrics_listener``, all raising ``ListenError`` with the same wording);
the probe only refuses what would fail there if nothing changed in between.

Every probe socket sets ``SO_REUSEADDR`` and none sets ``SO_REUSEPORT``, as the listeners do
(grpc with ``grpc.so_reuseport`` 0, ``http.server`` for Prometheus, the HTTP front end's
socket handed to uvicorn). So on Linux a port whose old connections linger in TIME_WAIT after
a restart binds, and a port another socket listens on (also through a wildcard address) does
not. Per setting:

- ``listen.plaintext``, ``listen.tls`` (grpc core's POSIX listener): the host is resolved with
  ``getaddrinfo`` (``AF_UNSPEC``, ``AI_PASSIVE``) and the address is refused only when none of
  the resolved addresses binds (grpc serves on those that do). A wildcard address (``0.0.0.0``,
  ``::``) binds if ``[::]`` dual-stack or ``0.0.0.0`` does. An IPv4 address is probed with an
  ``AF_INET`` socket where grpc binds its IPv4-mapped IPv6 form: on Linux both conflict with
  the same listeners. Addresses with a grpc URI scheme (``unix:``, ``unix-abstract:``,
  ``vsock:``) are not probed: grpc replaces a stale unix socket file itself.
- ``listen.http``, ``listen.https`` (``service.frontends.openai.listener``, which binds with
  ``http_socket`` below): ``AF_INET6`` when the host contains ``:``, else ``AF_INET``, bound to
  the host as given (a name resolves to its first address of that family).
- ``metrics_listen`` (``prometheus_client.start_http_server``): the family and address of
  ``getaddrinfo``'s first answer (``SOCK_STREAM``, ``AI_PASSIVE``).

Port 0 (the system picks a free port when the listener binds) has nothing to probe.
Addresses are ``HOST:PORT`` or ``[IPV6]:PORT`` as ``service.settings.config`` accepts them.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from xinserve_client.addresses import split_host_port

if TYPE_CHECKING:
    from service.settings.config import Settings

GRPC_URI_SCHEMES = ("unix:", "unix-abstract:", "vsock:")
"""Target prefixes grpc binds as something other than a TCP host and port: never probed."""


class ListenError(RuntimeError):
    """A listener cannot bind its address. The message names the address and the setting
    it came from, and is safe to print."""


def listen_error(address: str, setting: str, exc: OSError) -> ListenError:
    """``ListenError`` worded ``cannot listen on ADDRESS (SETTING): REASON``, REASON being the
    system's text for ``exc`` (e.g. ``Address already in use``, ``Cannot assign requested
    address``, ``Name or service not known``)."""
    return ListenError(f"cannot listen on {address} ({setting}): {exc.strerror or exc}")


def _bind(family: int, sockaddr: Any, *, v6only: bool | None = None) -> socket.socket:
    """A TCP socket of ``family`` with ``SO_REUSEADDR`` bound to ``sockaddr`` (not listening);
    the caller owns it. ``v6only`` sets ``IPV6_V6ONLY`` (None: the system default).

    Raises:
        OSError: the address cannot be bound (the socket is closed again).
    """
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if v6only is not None:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6only))
        sock.bind(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


@contextmanager
def _bound(family: int, sockaddr: Any, *, v6only: bool | None = None) -> Iterator[socket.socket]:
    """``_bind``'s socket, closed on exit. Raises OSError."""
    sock = _bind(family, sockaddr, v6only=v6only)
    try:
        yield sock
    finally:
        sock.close()


def http_socket(address: str) -> socket.socket:
    """A TCP socket bound to ``address`` (not listening yet), as the OpenAI-compatible HTTP
    listeners bind: ``AF_INET6`` when the host contains ``:``, else ``AF_INET``;
    ``SO_REUSEADDR`` on. The caller owns (and closes) it.

    Raises:
        OSError: the address cannot be bound (``socket.gaierror`` for a name that does not
            resolve).
    """
    host, port = split_host_port(address)
    return _bind(socket.AF_INET6 if ":" in host else socket.AF_INET, (host, port))


def _probe_http(address: str) -> None:
    http_socket(address).close()


def _probe_metrics(address: str) -> None:
    host, port = split_host_port(address)
    family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    with _bound(family, (sockaddr[0], port)):
        pass


def _probe_wildcard(port: int) -> None:
    """grpc's wildcard listener: ``[::]`` dual-stack, else ``0.0.0.0``; either will do."""
    try:
        with _bound(socket.AF_INET6, ("::", port), v6only=False):
            return
    except OSError:
        pass
    with _bound(socket.AF_INET, ("0.0.0.0", port)):  # noqa: S104 - the address the listener itself asks for
        pass


def _probe_grpc(address: str) -> None:
    if address.startswith(GRPC_URI_SCHEMES):
        return
    host, port = split_host_port(address)
    infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    first: OSError | None = None
    for family, _, _, _, sockaddr in infos:
        try:
            if ipaddress.ip_address(str(sockaddr[0]).partition("%")[0]).is_unspecified:
                _probe_wildcard(port)
            else:
                with _bound(family, sockaddr):
                    pass
        except OSError as exc:
            first = first or exc
            continue
        return
    if first is not None:
        raise first


_PROBES: dict[str, Callable[[str], None]] = {
    "listen.plaintext": _probe_grpc,
    "listen.tls": _probe_grpc,
    "listen.http": _probe_http,
    "listen.https": _probe_http,
    "metrics_listen": _probe_metrics,
}


def configured_listeners(settings: Settings) -> list[tuple[str, str]]:
    """Every listener address of ``settings`` as (setting, address), in the order the server
    binds them: ``metrics_listen``, ``listen.plaintext``, ``listen.tls``, ``listen.http``,
    ``listen.https``."""
    listen = settings.listen
    found: list[tuple[str, str]] = [("metrics_listen", settings.metrics_listen)] if settings.metrics_listen else []
    for setting, addresses in (
        ("listen.plaintext", listen.plaintext),
        ("listen.tls", listen.tls),
        ("listen.http", listen.http),
        ("listen.https", listen.https),
    ):
        found.extend((setting, a) for a in addresses)
    return found


def probe(setting: str, address: str) -> None:
    """Bind and close a socket for ``address`` as the listener of ``setting`` (a key of the
    module docstring's list) will bind it; nothing for port 0.

    Raises:
        ListenError: it cannot be bound now (port in use, address not on this host, name that
            does not resolve).
    """
    if split_host_port(address)[1] == 0 and not address.startswith(GRPC_URI_SCHEMES):
        return
    try:
        _PROBES[setting](address)
    except OSError as exc:
        raise listen_error(address, setting, exc) from None


def probe_listeners(settings: Settings) -> None:
    """``probe`` every address of ``configured_listeners(settings)``; creates nothing and
    leaves no socket open.

    Raises:
        ListenError: for the first address that cannot be bound now.
    """
    for setting, address in configured_listeners(settings):
        probe(setting, address)
