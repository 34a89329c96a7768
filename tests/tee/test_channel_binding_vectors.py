"""The channel-binding report data has two Python implementations (the server's
``trust.tee.binding`` and the client's ``xinserve_client.attestation``) and a Java one; all must
agree with the shared vectors in tests/fixtures/tee/channel_binding_vectors.json (the Java SDK's
ChannelBindingVectorsTest reads the same file) and with each other on any input."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tee.conftest import FIXTURES
from trust.tee import binding
from xinserve_client import attestation as client_att

DOC = json.loads((FIXTURES / "channel_binding_vectors.json").read_text())
CERTS = {name: pem.encode() for name, pem in DOC["certificates"].items()}
VECTORS = DOC["vectors"]


def test_vector_file_covers_the_edges() -> None:
    nonce_sizes = {len(bytes.fromhex(v["nonce"])) for v in VECTORS}
    digest_counts = {len(v["manifest_digests"]) for v in VECTORS}
    assert {16, 64} <= nonce_sizes, "shortest and longest nonce"
    assert 0 in digest_counts and max(digest_counts) >= 2, "no model and several (sort order)"
    assert {v["certificate"] for v in VECTORS} == set(CERTS)


def test_sm3_is_sm3() -> None:
    # GB/T 32905-2016, appendix A.1: SM3("abc").
    expected = "66c7f0f462eeedd9d1f2d46bdc10e4e24167c4875cf2f7a2297da02b8f4ba8e0"
    assert hashlib.new("sm3", b"abc").hexdigest() == expected
    assert client_att._sm3(b"abc").hex() == expected


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: f"{v['certificate']}-{len(v['nonce']) // 2}B")
def test_server_and_client_compute_the_vector(vector: dict) -> None:
    cert = CERTS[vector["certificate"]]
    nonce = bytes.fromhex(vector["nonce"])
    expected = bytes.fromhex(vector["report_data"])
    assert binding.spki_sha256(cert).hex() == vector["spki_sha256"]
    assert client_att.spki_sha256(cert).hex() == vector["spki_sha256"]
    spki = bytes.fromhex(vector["spki_sha256"])
    assert binding.channel_report_data(nonce, spki, vector["manifest_digests"]) == expected
    assert client_att.expected_report_data(nonce, spki, vector["manifest_digests"]) == expected


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: f"{v['certificate']}-{len(v['nonce']) // 2}B")
def test_binds_only_the_vectors_certificate(vector: dict) -> None:
    att = client_att.Attestation(
        nonce=bytes.fromhex(vector["nonce"]),
        tee="sample",
        evidence=b"",
        aux_evidence=b"",
        report_data=bytes.fromhex(vector["report_data"]),
        spki_sha256=bytes.fromhex(vector["spki_sha256"]),
        manifest_digests=tuple(vector["manifest_digests"]),
        recorded=True,
    )
    for name, cert in CERTS.items():
        assert att.binds(cert) is (name == vector["certificate"])
    other_nonce = bytes(b ^ 1 for b in att.nonce)
    assert not client_att.Attestation(**{**att.__dict__, "nonce": other_nonce}).binds(CERTS[vector["certificate"]])


digests = st.lists(st.binary(min_size=32, max_size=32).map(lambda b: "sm3:" + b.hex()), max_size=6)


@settings(max_examples=200, deadline=None)
@given(nonce=st.binary(min_size=16, max_size=64), spki=st.binary(min_size=32, max_size=32), ds=digests)
def test_server_and_client_agree_on_any_input(nonce: bytes, spki: bytes, ds: list[str]) -> None:
    server = binding.channel_report_data(nonce, spki, ds)
    assert server == client_att.expected_report_data(nonce, spki, list(reversed(ds)))
    assert len(server) == 64 and server[32:] == bytes(32)
