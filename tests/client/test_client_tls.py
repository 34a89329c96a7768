"""TLS, mTLS and bearer tokens over TLS, with certificates generated in the test (cryptography)."""

from __future__ import annotations

import pytest

from xinserve_client import AsyncXinserveClient, UnavailableError, XinserveClient

TINY = "xinserve-tiny-llama"


def test_tls_with_custom_ca(tls_server, pki):
    with XinserveClient(tls_server.target, ca_cert=pki.ca_pem) as c:
        assert c.generate(TINY, "abc").outputs[0].text == "cba"


def test_tls_ca_from_file_and_pem_text(tls_server, pki, tmp_path):
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(pki.ca_pem)
    with XinserveClient(tls_server.target, ca_cert=str(ca_file)) as c:
        assert c.health() == "SERVING"
    with XinserveClient(tls_server.target, ca_cert=ca_file) as c:
        assert c.health() == "SERVING"
    with XinserveClient(tls_server.target, ca_cert=pki.ca_pem.decode()) as c:
        assert c.health() == "SERVING"


def test_tls_wrong_ca_is_refused(tls_server, pki):
    with XinserveClient(tls_server.target, ca_cert=pki.other_ca_pem) as c, pytest.raises(UnavailableError):
        c.list_models(timeout=5)


def test_plaintext_client_to_tls_server_fails_cleanly(tls_server):
    with XinserveClient(tls_server.target) as c, pytest.raises(UnavailableError):
        c.list_models(timeout=5)


def test_token_over_tls_uses_call_credentials(tls_server, pki):
    calls = []

    def token() -> str:
        calls.append(1)
        return f"refreshed-{len(calls)}"

    with XinserveClient(tls_server.target, ca_cert=pki.ca_pem, token=token) as c:
        c.generate(TINY, "abc")
        c.generate(TINY, "abc")
    assert tls_server.state.last("Generate").metadata["authorization"] == "Bearer refreshed-2"


def test_mtls_client_certificate(mtls_server, pki):
    with XinserveClient(
        mtls_server.target, ca_cert=pki.ca_pem, client_cert=pki.client_cert_pem, client_key=pki.client_key_pem
    ) as c:
        c.generate(TINY, "abc")
    assert mtls_server.state.last("Generate").peer_cn == "svc-payments"


def test_mtls_without_client_certificate_is_refused(mtls_server, pki):
    with XinserveClient(mtls_server.target, ca_cert=pki.ca_pem) as c, pytest.raises(UnavailableError):
        c.generate(TINY, "abc", timeout=5)


async def test_async_mtls_and_token(mtls_server, pki, tmp_path):
    cert = tmp_path / "client.pem"
    key = tmp_path / "client.key"
    cert.write_bytes(pki.client_cert_pem)
    key.write_bytes(pki.client_key_pem)
    async with AsyncXinserveClient(
        mtls_server.target, ca_cert=pki.ca_pem, client_cert=cert, client_key=key, token="tk"
    ) as c:
        async with c.generate_stream(TINY, "x y") as stream:
            assert "".join([d.text async for d in stream]) == "x y"
    call = mtls_server.state.last("GenerateStream")
    assert call.peer_cn == "svc-payments"
    assert call.metadata["authorization"] == "Bearer tk"


def test_option_errors():
    with pytest.raises(ValueError, match="together"):
        XinserveClient("127.0.0.1:1", client_cert=b"x")
    with pytest.raises(ValueError, match="plaintext"):
        XinserveClient("10.0.0.5:50051", token="t")
    with pytest.raises(ValueError, match="cannot read ca_cert"):
        XinserveClient("127.0.0.1:1", ca_cert="/nonexistent/ca.pem")
    with pytest.raises(ValueError, match="timeout"):
        XinserveClient("127.0.0.1:1", timeout=0)
    with pytest.raises(ValueError, match="contradicts"):
        XinserveClient("127.0.0.1:1", tls=False, ca_cert=b"x")
    XinserveClient("10.0.0.5:50051", token="t", allow_insecure_token=True).close()
    XinserveClient("localhost:50051", token="t").close()


def test_failing_token_source_is_unavailable_on_tls_and_plaintext(tls_server, stand_in, pki):
    def token() -> str:
        raise RuntimeError("vault down")

    with XinserveClient(tls_server.target, ca_cert=pki.ca_pem, token=token) as c:
        with pytest.raises(UnavailableError, match="vault down"):
            c.list_models()
    with XinserveClient(stand_in.target, token=token) as c:
        with pytest.raises(UnavailableError, match="vault down"):
            c.list_models()
