"""Refused TLS handshakes on the HTTPS (OpenAI) front end are counted by front end and
OpenSSL reason: a real TLS client with a foreign-CA certificate, and one with none; a client
with a certificate from the configured CA is served and not counted. No engine needed."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from prometheus_client import REGISTRY

from service.frontends.grpc.server import Frontend
from service.frontends.openai.listener import HttpFrontend
from service.lifecycle.server import open_audit
from service.lifecycle.wiring import shared_core
from service.runtime.state import Runtime
from service.settings.config import load_settings
from tests.support.pki import make_pki

ASYNC = pytest.mark.asyncio(loop_scope="session")


def _failures() -> float:
    total = 0.0
    for metric in REGISTRY.collect():
        if metric.name == "xinserve_tls_handshake_failures":
            for sample in metric.samples:
                if sample.name.endswith("_total") and sample.labels.get("front_end") == "openai":
                    total += sample.value
    return total


def _reasons() -> set[str]:
    return {
        s.labels["reason"]
        for m in REGISTRY.collect()
        if m.name == "xinserve_tls_handshake_failures"
        for s in m.samples
        if s.name.endswith("_total")
    }


async def _get(port: int, context: ssl.SSLContext) -> bytes:
    """GET /health/live over TLS; whatever came back (b"" when the connection was refused)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    except (ssl.SSLError, ConnectionError):
        return b""
    try:
        writer.write(b"GET /health/live HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 60)
    except (ssl.SSLError, ConnectionError):
        return b""
    finally:
        writer.close()


async def _until(condition, what: str, limit_s: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@ASYNC
async def test_refused_handshakes_are_counted_and_a_good_client_is_not(tmp_path):
    pki = make_pki(tmp_path / "pki")
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"plaintext": ["127.0.0.1:0"], "https": ["127.0.0.1:0"]},
            "tls": {
                "cert_file": str(pki.server_cert),
                "key_file": str(pki.server_key),
                "client_ca_file": str(pki.ca_cert),
            },
            "metrics_listen": None,
        }
    )
    runtime = Runtime(settings)
    runtime.audit = await open_audit(settings)
    grpc_frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    http = HttpFrontend(grpc_frontend.core, grpc_frontend.inference, settings)
    await http.start()
    port = next(iter(http.ports.values()))

    def client(cert=None, key=None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        if cert is not None:
            context.load_cert_chain(str(cert), str(key))
        return context

    try:
        before = _failures()
        reply = await _get(port, client(pki.client_cert, pki.client_key))
        assert reply.startswith(b"HTTP/1.1 200")
        assert _failures() == before

        assert await _get(port, client(pki.stranger_cert, pki.stranger_key)) == b""
        await _until(lambda: _failures() == before + 1, "the foreign-CA handshake to be counted")
        assert "certificate_verify_failed" in _reasons()

        assert await _get(port, client()) == b""
        await _until(lambda: _failures() == before + 2, "the handshake without a certificate to be counted")
    finally:
        await http.stop()
        await runtime.audit.close()
