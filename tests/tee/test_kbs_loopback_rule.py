"""The KBS URL check (trust) and the client/server address check judge loopback alike."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from trust.tee.config import TeeSettings, _loopback
from xinserve_client.addresses import is_loopback_host

HOSTS = [
    ("127.0.0.1", True),
    ("127.0.0.2", True),
    ("127.255.255.254", True),
    ("::1", True),
    ("::ffff:127.0.0.2", True),
    ("localhost", True),
    ("LOCALHOST", True),
    ("kbs.localhost", True),
    ("128.0.0.1", False),
    ("10.0.0.1", False),
    ("::2", False),
    ("::ffff:10.0.0.1", False),
    ("localhost.example.com", False),
    ("kbs.example", False),
]


@pytest.mark.parametrize(("host", "loopback"), HOSTS)
def test_kbs_host_table(host: str, loopback: bool) -> None:
    assert _loopback(host) is loopback
    assert is_loopback_host(host) is loopback


@pytest.mark.parametrize(("host", "loopback"), HOSTS)
def test_plain_http_kbs_url_only_to_loopback(host: str, loopback: bool) -> None:
    netloc = f"[{host}]" if ":" in host else host
    url = f"http://{netloc}:8080"
    if loopback:
        assert TeeSettings(kbs_url=url).kbs_url == url
    else:
        with pytest.raises(ValidationError, match="plain http is allowed only to a loopback KBS"):
            TeeSettings(kbs_url=url)


_ipv4 = st.one_of(
    st.ip_addresses(v=4),
    st.integers(0, 2**24 - 1).map(lambda n: ipaddress.IPv4Address((127 << 24) + n)),
)
_addresses = st.one_of(
    _ipv4.map(str),
    st.ip_addresses(v=6).map(str),
    _ipv4.map(lambda ip: f"::ffff:{ip}"),
    st.tuples(st.from_regex(r"[a-z0-9-]{0,12}", fullmatch=True), st.sampled_from(["", ".localhost", "localhost"])).map(
        "".join
    ),
)


@given(_addresses)
def test_one_loopback_rule(host: str) -> None:
    assert _loopback(host) is is_loopback_host(host)
