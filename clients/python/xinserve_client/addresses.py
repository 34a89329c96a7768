"""HOST:PORT addresses and loopback checks, one rule for the server and the client.

Loopback is what ``ipaddress`` says it is (127.0.0.0/8 and ::1, IPv4-mapped included) plus the
host names that resolve there by convention (``localhost``, RFC 6761).
"""

from __future__ import annotations

import ipaddress

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def split_host_port(address: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPV6]:PORT`` → (host without brackets, port).

    Raises:
        ValueError: no port, a port that is not a number in 0..65535, or no host.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def is_loopback_host(host: str) -> bool:
    """True for a loopback IP address (``ipaddress``'s ``is_loopback``, IPv4-mapped IPv6 too)
    or a conventional loopback name; ``host`` without brackets or port."""
    name = host.strip("[]").lower()
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def target_host(target: str) -> str | None:
    """The host of a gRPC target or transport peer, without brackets or port; None for a unix
    socket (``unix:``, ``unix-abstract:``).

    Accepts the ``dns:``, ``dns:///``, ``ipv4:`` and ``ipv6:`` schemes (gRPC's naming doc and the
    peer strings of ``grpc.ServicerContext.peer()``), ``HOST:PORT``, ``[IPV6]:PORT`` (brackets also
    percent-encoded, ``%5B::1%5D:5000``, as newer gRPC peers write them), a bare host or IPv6
    address: ``ipv4:127.0.0.1:5000`` → ``127.0.0.1``, ``ipv6:[::1]:5000`` → ``::1``.
    """
    t = target
    if t.startswith(("unix:", "unix-abstract:")):
        return None
    for prefix in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if t.startswith(prefix):
            t = t[len(prefix) :]
            break
    if t[:3].upper() == "%5B":
        t = "[" + t[3:].replace("%5D", "]").replace("%5d", "]")
    if t.startswith("["):
        return t[1 : t.find("]")] if "]" in t else t[1:]
    if t.count(":") == 1:
        return t.rsplit(":", 1)[0]
    return t


def is_loopback_target(target: str) -> bool:
    """True for a gRPC target on a unix socket or a loopback host (the forms of
    :func:`target_host`)."""
    host = target_host(target)
    return host is None or is_loopback_host(host)
