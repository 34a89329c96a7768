"""TLS, mTLS and bearer tokens accept the right credentials and refuse the rest."""

from __future__ import annotations

import time

import grpc
import pytest

from service.access.auth import hash_token
from tests.conftest import TINY
from tests.server.frontends import extra_frontend
from tests.server.stubs import stubs
from tests.support.pki import make_pki
from xinserve.v1 import inference_pb2, sampling_pb2, server_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")

GOOD = "good-token-0123456789"
AUDITOR = "auditor-token-0123456789"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tokens") / "tokens.txt"
    path.write_text(f"# test tokens\nsvc-a {hash_token(GOOD)}\nauditor-1 sha256:{hash_token(AUDITOR)} auditor\n")
    path.chmod(0o600)
    return path


def tiny_call() -> inference_pb2.TokenizeRequest:
    return inference_pb2.TokenizeRequest(model=TINY, text="hi")


async def call_with(target, creds, metadata=()):
    channel = grpc.aio.secure_channel(target, creds) if creds else grpc.aio.insecure_channel(target)
    api = stubs(channel)
    try:
        return await api.inference.Tokenize(tiny_call(), metadata=metadata, timeout=10)
    finally:
        await api.close()


async def code_of(coro) -> grpc.StatusCode:
    try:
        await coro
    except grpc.aio.AioRpcError as err:
        return err.code()
    return grpc.StatusCode.OK


async def test_tls_with_tokens(live_server, pki, token_file):
    overrides = {
        "listen": {"plaintext": [], "tls": ["127.0.0.1:0"]},
        "tls": {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)},
        "auth": {"token_file": str(token_file), "required": True},
    }
    async with extra_frontend(live_server, overrides) as (_, _, port):
        target = f"localhost:{port}"
        creds = grpc.ssl_channel_credentials(pki.ca_cert.read_bytes())
        bearer = (("authorization", f"Bearer {GOOD}"),)
        reply = await call_with(target, creds, bearer)
        assert len(reply.token_ids) > 0
        assert (
            await code_of(call_with(target, creds, (("authorization", "Bearer wrong"),)))
            == grpc.StatusCode.UNAUTHENTICATED
        )
        assert await code_of(call_with(target, creds)) == grpc.StatusCode.UNAUTHENTICATED
        assert (
            await code_of(call_with(target, creds, (("authorization", "Basic abc"),)))
            == grpc.StatusCode.UNAUTHENTICATED
        )
        # The auditor role may read server state but not run inference.
        auditor = (("authorization", f"Bearer {AUDITOR}"),)
        assert await code_of(call_with(target, creds, auditor)) == grpc.StatusCode.PERMISSION_DENIED
        channel = grpc.aio.secure_channel(target, creds)
        load = await stubs(channel).server.GetLoad(server_pb2.GetLoadRequest(), metadata=auditor)
        assert load.running == 0
        await channel.close()
        # Plaintext to a TLS port, and TLS with an untrusted CA, never get through.
        assert await code_of(call_with(target, None, bearer)) == grpc.StatusCode.UNAVAILABLE
        wrong_ca = grpc.ssl_channel_credentials(pki.other_ca_cert.read_bytes())
        assert await code_of(call_with(target, wrong_ca, bearer)) == grpc.StatusCode.UNAVAILABLE


async def test_mtls_subject_becomes_principal(live_server, pki):
    overrides = {
        "listen": {"plaintext": [], "tls": ["127.0.0.1:0"]},
        "tls": {
            "cert_file": str(pki.server_cert),
            "key_file": str(pki.server_key),
            "client_ca_file": str(pki.ca_cert),
        },
        "auth": {"required": True},
    }
    async with extra_frontend(live_server, overrides) as (_, _, port):
        target = f"localhost:{port}"
        ca = pki.ca_cert.read_bytes()
        good = grpc.ssl_channel_credentials(ca, pki.client_key.read_bytes(), pki.client_cert.read_bytes())
        reply = await call_with(target, good)
        assert len(reply.token_ids) > 0
        no_cert = grpc.ssl_channel_credentials(ca)
        assert await code_of(call_with(target, no_cert)) == grpc.StatusCode.UNAVAILABLE
        stranger = grpc.ssl_channel_credentials(ca, pki.stranger_key.read_bytes(), pki.stranger_cert.read_bytes())
        assert await code_of(call_with(target, stranger)) == grpc.StatusCode.UNAVAILABLE


async def test_principal_and_certificate_reach_the_audit_record(live_server, pki, token_file):
    from audit import QueryFilter, decode_record

    overrides = {
        "listen": {"plaintext": [], "tls": ["127.0.0.1:0"]},
        "tls": {
            "cert_file": str(pki.server_cert),
            "key_file": str(pki.server_key),
            "client_ca_file": str(pki.ca_cert),
        },
        "auth": {"token_file": str(token_file), "required": True},
    }
    since = int(time.time() * 1000) - 1000
    async with extra_frontend(live_server, overrides, audit=live_server.runtime.audit) as (_, _, port):
        creds = grpc.ssl_channel_credentials(
            pki.ca_cert.read_bytes(), pki.client_key.read_bytes(), pki.client_cert.read_bytes()
        )
        await call_with(f"localhost:{port}", creds)
        await call_with(f"localhost:{port}", creds, (("authorization", f"Bearer {GOOD}"),))
    rows = await live_server.runtime.audit.log.query(
        QueryFilter(since_ms=since, method="/xinserve.v1.InferenceService/Tokenize")
    )
    records = [decode_record(r.body)[2] for r in rows]
    by_method = {(r.auth_method, r.principal) for r in records}
    assert ("mtls", "CN=alice,O=xinserve tests") in by_method
    assert ("token", "svc-a") in by_method
    mtls = next(r for r in records if r.auth_method == "mtls")
    assert mtls.cert_fingerprint and len(mtls.cert_fingerprint) == 64


async def test_unauthenticated_generate_is_refused_before_the_engine(live_server, token_file):
    overrides = {"listen": {"plaintext": ["127.0.0.1:0"]}, "auth": {"token_file": str(token_file), "required": True}}
    async with extra_frontend(live_server, overrides) as (_, _, port):
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stubs(channel).inference.Generate(
                inference_pb2.GenerateRequest(
                    model=TINY, prompt="x", sampling_params=sampling_pb2.SamplingParams(max_tokens=2)
                )
            )
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        await channel.close()


async def test_only_the_owner_may_abort(live_server, token_file):
    overrides = {"listen": {"plaintext": ["127.0.0.1:0"]}, "auth": {"token_file": str(token_file)}}
    async with extra_frontend(live_server, overrides) as (_, runtime, port):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            api = stubs(channel)
            owner = (("authorization", f"Bearer {GOOD}"),)
            call = api.inference.GenerateStream(
                inference_pb2.GenerateRequest(
                    model=TINY,
                    prompt="mine",
                    request_id="owned-1",
                    sampling_params=sampling_pb2.SamplingParams(max_tokens=1500, ignore_eos=True),
                ),
                metadata=owner,
            )
            await call.read()
            stranger = await api.inference.Abort(inference_pb2.AbortRequest(request_id="owned-1"))
            assert stranger.aborted is False
            assert "owned-1" in runtime.active_requests
            mine = await api.inference.Abort(inference_pb2.AbortRequest(request_id="owned-1"), metadata=owner)
            assert mine.aborted is True
            call.cancel()


async def test_refused_tokens_are_recorded_as_such_and_two_headers_are_refused(live_server, token_file):
    from audit import QueryFilter, decode_record

    overrides = {"listen": {"plaintext": ["127.0.0.1:0"]}, "auth": {"token_file": str(token_file)}}
    since = int(time.time() * 1000) - 1000
    async with extra_frontend(live_server, overrides, audit=live_server.runtime.audit) as (_, _, port):
        target = f"127.0.0.1:{port}"
        guessed = await code_of(
            call_with(target, None, (("authorization", "Bearer guessed-0000"), ("x-request-id", "guess-1")))
        )
        assert guessed == grpc.StatusCode.UNAUTHENTICATED
        # Before the fix the first header won and the second was ignored: an ambiguous request.
        both = (("authorization", f"Bearer {GOOD}"), ("authorization", "Bearer junk"), ("x-request-id", "two-1"))
        assert await code_of(call_with(target, None, both)) == grpc.StatusCode.UNAUTHENTICATED
        assert await code_of(call_with(target, None, (("x-request-id", "anon-1"),))) == grpc.StatusCode.OK
    rows = await live_server.runtime.audit.log.query(QueryFilter(since_ms=since))
    by_id = {r.request_id: r for r in (decode_record(row.body)[2] for row in rows) if r.request_id}
    # Before the fix a refused token was recorded as "anonymous", like a call without credentials.
    assert (by_id["guess-1"].principal, by_id["guess-1"].auth_method) == (None, "token")
    assert by_id["guess-1"].outcome == "UNAUTHENTICATED"
    assert by_id["two-1"].outcome == "UNAUTHENTICATED"
    assert (by_id["anon-1"].principal, by_id["anon-1"].auth_method) == ("anonymous", "anonymous")


async def test_traceparent_follows_w3c_trace_context():
    from service.frontends.grpc.interceptors import trace_id_from

    tid = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id_from(f"00-{tid}-00f067aa0ba902b7-01") == tid
    assert trace_id_from(f"ff-{tid}-00f067aa0ba902b7-01") is None  # version ff is invalid (was accepted)
    assert trace_id_from(f"00-{'0' * 32}-00f067aa0ba902b7-01") is None
    assert trace_id_from(f"00-{tid}-{'0' * 16}-01") is None  # all-zero parent id is invalid (was accepted)
    assert trace_id_from("garbage") is None
