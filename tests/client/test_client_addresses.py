"""xinserve_client.addresses: the host of a gRPC target or peer, and loopback."""

from __future__ import annotations

import pytest

from xinserve_client.addresses import is_loopback_target, target_host


@pytest.mark.parametrize(
    ("target", "host"),
    [
        ("ipv4:127.0.0.1:5000", "127.0.0.1"),
        ("ipv4:10.1.2.3:443", "10.1.2.3"),
        ("ipv6:[::1]:5000", "::1"),
        ("ipv6:%5B::1%5D:5000", "::1"),
        ("ipv6:%5Bfe80::1%5D:5000", "fe80::1"),
        ("dns:///example.com:50051", "example.com"),
        ("dns:example.com:50051", "example.com"),
        ("127.0.0.2:50051", "127.0.0.2"),
        ("[::1]:50051", "::1"),
        ("::1", "::1"),
        ("localhost", "localhost"),
        ("unix:/run/xinserve.sock", None),
        ("unix-abstract:xinserve", None),
    ],
)
def test_target_host(target: str, host: str | None) -> None:
    assert target_host(target) == host


@pytest.mark.parametrize(
    ("target", "loopback"),
    [
        ("ipv4:127.0.0.2:5000", True),
        ("ipv6:%5B::1%5D:5000", True),
        ("ipv6:%5B::2%5D:5000", False),
        ("ipv4:10.0.0.1:5000", False),
        ("unix:/run/xinserve.sock", True),
    ],
)
def test_peer_strings_are_targets(target: str, loopback: bool) -> None:
    assert is_loopback_target(target) is loopback
