"""AttestationService over real TLS: the client checks the channel binding (and it fails for a
different certificate); GetServerInfo reports the TEE; every GetAttestation is audited."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio

from audit import AuditLog, AuditSettings, ContentCapture, EventType, QueryFilter, decode_record
from service.app import authenticator_for
from service.audit_trail import AuditTrail
from service.config import load_settings
from service.frontend import Frontend
from service.runtime import ModelEntry, ModelState, Runtime
from service.tee_hook import TeeHook
from tests.audit.rsyslog_collector import free_port
from tests.support.pki import make_pki
from tests.tee.conftest import FIXTURES
from trust.sm2 import Sm2PrivateKey
from xinserve_client import FailedPreconditionError, InvalidArgumentError, XinserveClient
from xinserve_client.attestation import (
    AttestationError,
    RecordedVerifier,
    peer_certificate,
    verify_channel,
)

DIGESTS = ["sm3:" + "ab" * 32, "sm3:" + "01" * 32]


@pytest_asyncio.fixture
async def tee_server(tmp_path: Path):
    pki = make_pki(tmp_path / "pki")
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "metrics_listen": None,
            "listen": {"plaintext": ["127.0.0.1:0"], "tls": [f"127.0.0.1:{free_port()}"]},
            "tls": {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)},
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
    frontend = Frontend(runtime, settings, authenticator_for(settings), "cpu")
    await frontend.start()
    plain_port = frontend.ports["127.0.0.1:0"]
    tls_port = next(port for address, port in frontend.ports.items() if address != "127.0.0.1:0")
    try:
        yield runtime, pki, f"127.0.0.1:{plain_port}", f"localhost:{tls_port}"
    finally:
        await frontend.stop(0)
        await audit_log.close()


async def _events(runtime: Runtime, event: EventType) -> list:
    assert runtime.audit is not None
    rows = await runtime.audit.log.query(QueryFilter(event=event.value))
    return [decode_record(r.body)[2] for r in rows]


async def test_channel_binding_over_tls(tee_server) -> None:
    import asyncio

    runtime, pki, _plain, tls_target = tee_server
    ca = pki.ca_cert.read_bytes()

    def client_side():
        with XinserveClient(tls_target, tls=True, ca_cert=ca) as client:
            att = client.attestation()
            info = client.server_info()
        return att, info

    att, info = await asyncio.to_thread(client_side)
    assert att.tee == "sample" and att.recorded
    assert sorted(att.manifest_digests) == sorted(DIGESTS)  # only the served (READY) models
    seen = await asyncio.to_thread(peer_certificate, tls_target, ca)
    verified = verify_channel(att, seen, RecordedVerifier(), expected_models=DIGESTS)
    assert verified.recorded and att.binds(pki.server_cert.read_bytes())
    # Another certificate (another key) does not bind, nor do other models or another nonce.
    assert not att.binds(pki.client_cert.read_bytes())
    assert not att.binds(pki.stranger_cert.read_bytes())
    with pytest.raises(AttestationError):
        verify_channel(att, pki.stranger_cert.read_bytes(), RecordedVerifier())
    assert not att.binds(seen, expected_models=DIGESTS[:1])
    from dataclasses import replace

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
    import asyncio

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
