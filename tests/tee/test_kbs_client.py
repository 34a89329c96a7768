"""The KBS client against the loopback KBS: the release, and every refusal fails closed."""

from __future__ import annotations

import socket

import pytest

from tests.tee.kbs_server import KbsServer
from trust.tee.errors import KeyReleaseError, TeeReason
from trust.tee.evidence import Evidence
from trust.tee.kbs_client import KbsClient
from trust.tee.recorded import RecordedProvider

KEY = bytes(range(16))
RESOURCE = "xinserve/model-key/tiny"


@pytest.fixture
def provider(recorded_file):
    return RecordedProvider(recorded_file, allow=True)


def test_release_returns_the_resource_and_marks_recorded_evidence(kbs: KbsServer, provider) -> None:
    kbs.state.resources[RESOURCE] = KEY
    released = KbsClient(kbs.url, provider).get_resource(RESOURCE)
    assert released.value == KEY
    assert released.recorded is True and released.tee == "sample"
    assert [entry[:2] for entry in kbs.state.log] == [("auth", 200), ("attest", 200), ("resource", 200)]


def test_wrong_nonce_is_refused(kbs: KbsServer, provider) -> None:
    kbs.state.resources[RESOURCE] = KEY
    client = KbsClient(kbs.url, provider)
    old = client.auth()
    new = client.auth()
    try:
        stale = client.evidence_for(new, nonce=old.nonce)  # evidence for another session's challenge
        with pytest.raises(KeyReleaseError) as err:
            client.attest(new, stale, nonce=old.nonce)
        assert err.value.reason is TeeReason.KBS_REFUSED
        assert kbs.state.log[-1] == ("attest", 401, "wrong_nonce")
        with pytest.raises(KeyReleaseError) as err:
            client.resource(new, RESOURCE)
        assert err.value.reason is TeeReason.KBS_REFUSED
    finally:
        old.close()
        new.close()


def test_replayed_session_is_refused(kbs: KbsServer, provider) -> None:
    kbs.state.resources[RESOURCE] = KEY
    client = KbsClient(kbs.url, provider)
    session = client.auth()
    try:
        client.attest(session, client.evidence_for(session))
        with pytest.raises(KeyReleaseError) as err:
            client.attest(session, client.evidence_for(session))
        assert err.value.reason is TeeReason.KBS_REFUSED
        assert kbs.state.log[-1] == ("attest", 401, "replayed_session")
    finally:
        session.close()


def test_evidence_not_binding_the_key_is_refused(kbs: KbsServer, provider) -> None:
    kbs.state.resources[RESOURCE] = KEY
    client = KbsClient(kbs.url, provider)
    session = client.auth()
    try:
        genuine = client.evidence_for(session)
        unbound = Evidence(genuine.tee, provider.collect(b"\x01" * 64).raw, b"\x01" * 64, recorded=True)
        with pytest.raises(KeyReleaseError) as err:
            client.attest(session, unbound)
        assert err.value.reason is TeeReason.KBS_REFUSED
        assert kbs.state.log[-1] == ("attest", 401, "unbound_key")
    finally:
        session.close()


def test_resource_policy_denies(kbs: KbsServer, provider) -> None:
    kbs.state.resources[RESOURCE] = KEY
    kbs.state.resource_policy = lambda claims, resource: not claims.recorded
    with pytest.raises(KeyReleaseError) as err:
        KbsClient(kbs.url, provider).get_resource(RESOURCE)
    assert err.value.reason is TeeReason.POLICY_DENIED
    assert kbs.state.log[-1] == ("resource", 403, "resource_policy")


def test_attestation_policy_denies(kbs: KbsServer, provider) -> None:
    kbs.state.resources[RESOURCE] = KEY
    kbs.state.attestation_policy = lambda claims: claims.tee == "tdx"
    with pytest.raises(KeyReleaseError) as err:
        KbsClient(kbs.url, provider).get_resource(RESOURCE)
    assert err.value.reason is TeeReason.KBS_REFUSED
    assert "PolicyDeny" in err.value.detail


def test_unknown_resource_is_not_found(kbs: KbsServer, provider) -> None:
    with pytest.raises(KeyReleaseError) as err:
        KbsClient(kbs.url, provider).get_resource(RESOURCE)
    assert err.value.reason is TeeReason.RESOURCE_NOT_FOUND


def test_malformed_jwe_is_refused(kbs: KbsServer, provider) -> None:
    kbs.state.resources[RESOURCE] = KEY
    kbs.state.malformed_jwe = True
    with pytest.raises(KeyReleaseError) as err:
        KbsClient(kbs.url, provider).get_resource(RESOURCE)
    assert err.value.reason is TeeReason.MALFORMED_JWE


def test_kbs_unreachable(provider) -> None:
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(KeyReleaseError) as err:
            KbsClient(f"http://127.0.0.1:{port}", provider, timeout=5).get_resource(RESOURCE)
    assert err.value.reason is TeeReason.KBS_UNREACHABLE


def test_no_tee_never_contacts_the_kbs(kbs: KbsServer) -> None:
    from trust.tee.errors import EvidenceError
    from trust.tee.none_provider import NoTeeProvider

    kbs.state.resources[RESOURCE] = KEY
    with pytest.raises(EvidenceError) as err:
        KbsClient(kbs.url, NoTeeProvider()).get_resource(RESOURCE)
    assert err.value.reason is TeeReason.NO_TEE
    assert kbs.state.log == []


@pytest.mark.parametrize("resource", ["../x/y", "a/b", "a/b/c/d", "a/b/c d", ""])
def test_resource_ids_are_checked_before_any_request(kbs: KbsServer, provider, resource: str) -> None:
    with pytest.raises(ValueError):
        KbsClient(kbs.url, provider).get_resource(resource)
    assert kbs.state.log == []
