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


def is_loopback_target(target: str) -> bool:
    """True for a gRPC target on a unix socket or a loopback host (``dns:``, ``ipv4:``,
    ``ipv6:`` schemes, ``HOST:PORT``, ``[IPV6]:PORT``, a bare host or IPv6 address)."""
    t = target
    if t.startswith(("unix:", "unix-abstract:")):
        return True
    for prefix in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if t.startswith(prefix):
            t = t[len(prefix) :]
            break
    if t.startswith("["):
        host = t[1 : t.find("]")] if "]" in t else t[1:]
    elif t.count(":") == 1:
        host = t.rsplit(":", 1)[0]
    else:
        host = t
    return is_loopback_host(host)
