"""AttestationService over real TLS: the client checks the channel binding on a channel pinned to
the server's certificate (and it fails for a different certificate, for an unpinned channel, and
through a selective MITM); GetServerInfo reports the TEE; every GetAttestation is audited."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from pathlib import Path

import pytest
import pytest_asyncio

from audit import AuditLog, AuditSettings, ContentCapture, EventType, QueryFilter, decode_record
from service.core.audit_trail import AuditTrail
from service.frontends.grpc.server import Frontend
from service.lifecycle.wiring import shared_core
from service.runtime.state import ModelEntry, ModelState, Runtime
from service.runtime.tee_hook import TeeHook
from service.settings.config import load_settings
from tests.audit.rsyslog_collector import free_port
from tests.support.pki import _leaf, make_pki
from tests.tee.conftest import FIXTURES
from tests.tee.selective_mitm import SelectiveMitm
from trust.sm2 import Sm2PrivateKey
from xinserve_client import FailedPreconditionError, InvalidArgumentError, UnavailableError, XinserveClient
from xinserve_client.attestation import (
    AttestationError,
    RecordedVerifier,
    pinned_certificate,
    verify_channel,
)

DIGESTS = ["sm3:" + "ab" * 32, "sm3:" + "01" * 32]


@contextlib.asynccontextmanager
async def _serving(tmp_path: Path, cert_file: Path, key_file: Path):
    """A TEE-enabled server (recorded provider) on a plaintext and a TLS listener: (runtime,
    plaintext target, TLS target)."""
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "metrics_listen": None,
            "listen": {"plaintext": ["127.0.0.1:0"], "tls": [f"127.0.0.1:{free_port()}"]},
            "tls": {"cert_file": str(cert_file), "key_file": str(key_file)},
            "tee": {
                "provider": "recorded",
                "recorded_evidence_file": str(FIXTURES / "tdx_quote_4.dat"),
                "allow_recorded": True,
            },
        }
    )
    key = Sm2PrivateKey.generate()
    audit_log = await AuditLog.open(
        AuditSettings(path=tmp_path / "audit.db", node_id="tee-node", retention_enabled=False),
        signer=key,
        start_ticker=False,
    )
    runtime = Runtime(settings)
    runtime.audit = AuditTrail(audit_log, ContentCapture(), key.public_key())
    runtime.tee = await TeeHook.start(settings.tee, runtime)
    for i, digest in enumerate(DIGESTS):
        entry = ModelEntry(f"m{i}", "generate", tmp_path / f"m{i}", manifest_digest=digest)
        runtime.add_model(entry)
        await runtime.mark(entry, ModelState.READY)
    failed = ModelEntry("refused", "generate", tmp_path / "x", manifest_digest="sm3:" + "ff" * 32)
    runtime.add_model(failed)
    await runtime.mark(failed, ModelState.FAILED, "key refused")
    frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    await frontend.start()
    plain_port = frontend.ports["127.0.0.1:0"]
    tls_port = next(port for address, port in frontend.ports.items() if address != "127.0.0.1:0")
    try:
        yield runtime, f"127.0.0.1:{plain_port}", f"localhost:{tls_port}"
    finally:
        await frontend.stop(0)
        await audit_log.close()


@pytest_asyncio.fixture
async def tee_server(tmp_path: Path):
    pki = make_pki(tmp_path / "pki")
    async with _serving(tmp_path, pki.server_cert, pki.server_key) as (runtime, plain, tls):
        yield runtime, pki, plain, tls


async def _events(runtime: Runtime, event: EventType) -> list:
    assert runtime.audit is not None
    rows = await runtime.audit.log.query(QueryFilter(event=event.value))
    return [decode_record(r.body)[2] for r in rows]


async def test_channel_binding_over_tls(tee_server) -> None:
    runtime, pki, _plain, tls_target = tee_server
    pin = pki.server_cert.read_bytes()

    def client_side():
        with XinserveClient(tls_target, tls=True, ca_cert=pin) as client:  # pinned to the server's certificate
            att = client.attestation()
            info = client.server_info()
        return att, info

    att, info = await asyncio.to_thread(client_side)
    assert att.tee == "sample" and att.recorded
    assert sorted(att.manifest_digests) == sorted(DIGESTS)  # only the served (READY) models
    assert att.channel_certificate == pinned_certificate(pin)
    seen = att.channel_certificate
    verified = verify_channel(att, RecordedVerifier(), expected_models=DIGESTS)
    assert verified.recorded and att.binds(pki.server_cert.read_bytes())
    # Another certificate (another key) does not bind, nor do other models or another nonce.
    assert not att.binds(pki.client_cert.read_bytes())
    assert not att.binds(pki.stranger_cert.read_bytes())
    from dataclasses import replace

    with pytest.raises(AttestationError, match="does not bind"):
        stranger = pinned_certificate(pki.stranger_cert.read_bytes())
        verify_channel(replace(att, channel_certificate=stranger), RecordedVerifier())
    with pytest.raises(AttestationError, match="does not bind"):
        verify_channel(att, RecordedVerifier(), expected_models=DIGESTS[:1])
    assert not att.binds(seen, expected_models=DIGESTS[:1])
    assert not replace(att, nonce=b"\0" * 32).binds(seen)
    # GetServerInfo reports the TEE.
    assert info.tee.tee == "sample" and info.tee.recorded and not info.tee.keys_from_kbs
    # The startup attestation and the client's are audited, marked recorded.
    events = await _events(runtime, EventType.ATTESTATION_COLLECTED)
    purposes = [e.detail["purpose"] for e in events]
    assert purposes == ["startup", "client"]
    assert all(e.detail["recorded"] is True for e in events)
    assert "nonce_sm3" in events[1].detail and "evidence" not in events[1].detail


async def test_refusals(tee_server) -> None:
    runtime, pki, plain_target, tls_target = tee_server
    ca = pki.ca_cert.read_bytes()

    def calls():
        out = []
        with XinserveClient(plain_target) as client:  # nothing to bind on plaintext
            with pytest.raises(FailedPreconditionError) as err:
                client.attestation()
            out.append(err.value.reason)
        with XinserveClient(tls_target, tls=True, ca_cert=ca) as client:
            with pytest.raises(InvalidArgumentError) as err:
                client.attestation(b"short")
            out.append(err.value.reason)
        return out

    assert await asyncio.to_thread(calls) == ["ATTESTATION_NEEDS_TLS", "INVALID_ARGUMENT"]
    runtime.tee = None

    def no_tee():
        with XinserveClient(tls_target, tls=True, ca_cert=ca) as client:
            with pytest.raises(FailedPreconditionError) as err:
                client.attestation()
            return err.value.reason, client.server_info().tee.tee

    assert await asyncio.to_thread(no_tee) == ("NO_TEE", "none")


def test_recorded_verifier_refuses_hardware_evidence() -> None:
    from xinserve_client.attestation import Attestation

    att = Attestation(b"n" * 32, "tdx", (FIXTURES / "tdx_quote_4.dat").read_bytes(), b"", bytes(64), b"", (), False)
    with pytest.raises(AttestationError, match="cannot verify"):
        RecordedVerifier().verify(att)


def _pem(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


async def test_binding_refuses_a_selective_mitm(tmp_path: Path) -> None:
    """A MITM holding a certificate the client's CA issued terminates the client's first connection
    (reading the call in clear, forwarding it to the real server, which binds its own SPKI) and
    splices every later one: a probe over a second connection sees the real certificate and
    the binding "verifies". The pinned channel refuses the MITM's handshake; an unpinned one
    cannot be verified at all."""
    from cryptography.hazmat.primitives import serialization

    from tests.support.pki import _ca

    ca, ca_key = _ca("issuing CA")
    server, server_key = _leaf(ca, ca_key, "localhost", server=True)
    rogue, rogue_key = _leaf(ca, ca_key, "localhost", server=True)  # same CA, same name, another key
    files = {}
    for name, cert, key in (("server", server, server_key), ("rogue", rogue, rogue_key)):
        files[name] = (tmp_path / f"{name}.pem", tmp_path / f"{name}.key")
        files[name][0].write_bytes(_pem(cert))
        files[name][1].write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    ca_pem, server_pem = _pem(ca), _pem(server)
    terminate = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    terminate.load_cert_chain(*files["rogue"])
    terminate.set_alpn_protocols(["h2"])
    onward = ssl.create_default_context(cadata=ca_pem.decode())
    onward.set_alpn_protocols(["h2"])

    async with _serving(tmp_path, *files["server"]) as (_runtime, _plain, tls_target):
        port = int(tls_target.rpartition(":")[2])
        mitm = await SelectiveMitm(("127.0.0.1", port), terminate, onward, "localhost").start()
        via_mitm = f"localhost:{mitm.port}"
        try:

            def unpinned_through_mitm():
                with XinserveClient(via_mitm, tls=True, ca_cert=ca_pem) as client:
                    return client.attestation()

            att = await asyncio.to_thread(unpinned_through_mitm)
            assert mitm.intercepted == 1 and b"/xinserve.v1.AttestationService/GetAttestation" in mitm.cleartext

            def second_connection_probe() -> bytes:  # what a peer-certificate probe sees
                with socket.create_connection(("127.0.0.1", mitm.port), timeout=10) as sock:
                    with onward.wrap_socket(sock, server_hostname="localhost") as tls:
                        der = tls.getpeercert(binary_form=True)
                assert der is not None
                return der

            probe = await asyncio.to_thread(second_connection_probe)
            assert mitm.connections == 2 and mitm.intercepted == 1
            # The attack on a second-connection probe: it sees the real server and the binding holds.
            assert att.binds(probe) and RecordedVerifier().verify(att).report_data == att.report_data
            # The documented flow refuses: the channel was not pinned, so nothing binds it.
            assert att.channel_certificate is None
            with pytest.raises(AttestationError, match="not pinned"):
                verify_channel(att, RecordedVerifier())

            def pinned(target: str):
                with XinserveClient(target, tls=True, ca_cert=server_pem, control_timeout=10) as client:
                    return client.attestation()

            mitm.connections = 0  # the MITM intercepts the pinned client's first connection too
            with pytest.raises(UnavailableError):
                await asyncio.to_thread(pinned, via_mitm)
            # It tried to terminate the pinned client's connection; the client refused its certificate
            # before sending anything, so the MITM saw only the first (unpinned) client's call.
            assert mitm.intercepted == 2
            assert mitm.cleartext.count(b"/xinserve.v1.AttestationService/GetAttestation") == 1
            direct = await asyncio.to_thread(pinned, tls_target)
            assert verify_channel(direct, RecordedVerifier()).recorded
        finally:
            await mitm.stop()


def test_pinned_certificate() -> None:
    from tests.support.pki import _ca

    ca, ca_key = _ca("issuing CA")
    leaf, _ = _leaf(ca, ca_key, "localhost", server=True)
    assert pinned_certificate(_pem(leaf)) is not None
    assert pinned_certificate(_pem(ca)) is None  # a CA can issue another certificate
    assert pinned_certificate(_pem(leaf) + _pem(leaf)) is None  # a bundle
    assert pinned_certificate(None) is None and pinned_certificate(b"junk") is None
