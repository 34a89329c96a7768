"""Login lockouts over real gRPC (and mTLS) with a real audit log: each lockout kind refuses what
it should and is audited once as a ``login_lockout`` event (the throttle's own rules are in
test_login_throttle.py)."""

from __future__ import annotations

from contextlib import asynccontextmanager

import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from audit import QueryFilter, decode_record
from service.access.auth import hash_token
from service.frontends.grpc.server import Frontend
from service.lifecycle.server import open_audit
from service.lifecycle.wiring import shared_core
from service.runtime.state import Runtime
from service.settings.config import load_settings
from xinserve.v1 import model_pb2, model_pb2_grpc

GOOD = "throttle-good-0123456789"


@asynccontextmanager
async def _throttled_server(tmp_path, auth: dict, pki=None):
    """A gRPC front end with a token file holding GOOD (principal ``svc``), a real audit log and
    the given ``auth`` settings; with ``pki`` (``_Pki``) a TLS listener requiring client
    certificates. Yields (runtime, target)."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"svc {hash_token(GOOD)} user\n")
    tokens.chmod(0o600)
    listen: dict = {"plaintext": ["127.0.0.1:0"]}
    tls: dict = {}
    if pki is not None:
        cert = pki._write("server.pem", pki.server_cert.public_bytes(serialization.Encoding.PEM))
        key = pki._write("server.key", pki.server_key)
        listen = {"plaintext": [], "tls": ["127.0.0.1:0"]}
        tls = {"cert_file": str(cert), "key_file": str(key), "client_ca_file": str(pki.ca_file)}
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": listen,
            "tls": tls,
            "auth": {"token_file": str(tokens), **auth},
            "metrics_listen": None,
        }
    )
    runtime = Runtime(settings)
    runtime.audit = await open_audit(settings)
    frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    try:
        await frontend.start()
        await runtime.set_serving(True)
        yield runtime, f"127.0.0.1:{next(iter(frontend.ports.values()))}"
    finally:
        await frontend.stop(0)
        await runtime.audit.close()


async def _list_models(channel, token: str | None) -> grpc.StatusCode:
    metadata = (("authorization", f"Bearer {token}"),) if token is not None else ()
    try:
        await model_pb2_grpc.ModelServiceStub(channel).ListModels(model_pb2.ListModelsRequest(), metadata=metadata)
    except grpc.aio.AioRpcError as err:
        return err.code()
    return grpc.StatusCode.OK


async def _lockout_events(runtime) -> list:
    rows = await runtime.audit.log.query(QueryFilter(event="login_lockout"))
    return [decode_record(row.body)[2] for row in rows]


UNAUTH, LOCKED, OK = grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OK


@pytest.mark.asyncio(loop_scope="session")
async def test_one_wrong_token_is_locked_out_and_audited_once(tmp_path):
    auth = {"max_failed_logins": 100, "max_failed_logins_per_principal": 3}
    async with _throttled_server(tmp_path, auth) as (runtime, target):
        async with grpc.aio.insecure_channel(target) as channel:
            assert [await _list_models(channel, "revoked-token") for _ in range(3)] == [UNAUTH] * 3
            assert [await _list_models(channel, "revoked-token") for _ in range(5)] == [LOCKED] * 5
            # Another token from the same address is not locked out by that token's lockout.
            assert await _list_models(channel, "another-guess") == UNAUTH
            assert await _list_models(channel, GOOD) == OK
        (event,) = await _lockout_events(runtime)
    assert event.outcome == "RESOURCE_EXHAUSTED"
    assert event.detail["scope"] == "token" and event.detail["failures"] == 3
    assert event.detail["peer"] == "127.0.0.1" and event.detail["lockout_ms"] == 300_000
    assert "locked" not in event.detail  # never a token's digest


@pytest.mark.asyncio(loop_scope="session")
async def test_by_default_wrong_tokens_from_all_sources_lock_no_one_else_out(tmp_path):
    """Without ``auth.max_failed_logins_global`` (the default) no number of wrong tokens
    refuses another caller's good token: the per-address budget is raised here to stand for
    guesses spread over many addresses."""
    async with _throttled_server(tmp_path, {"max_failed_logins": 100_000}) as (runtime, target):
        async with grpc.aio.insecure_channel(target) as channel:
            codes = {await _list_models(channel, f"guess-{i}") for i in range(1100)}
            assert codes == {UNAUTH}
            assert await _list_models(channel, GOOD) == OK
        assert await _lockout_events(runtime) == []


@pytest.mark.asyncio(loop_scope="session")
async def test_the_global_budget_locks_every_token_login_out(tmp_path):
    auth = {"max_failed_logins": 100, "max_failed_logins_global": 4, "global_lockout_s": 120}
    async with _throttled_server(tmp_path, auth) as (runtime, target):
        async with grpc.aio.insecure_channel(target) as channel:
            assert [await _list_models(channel, f"guess-{i}") for i in range(4)] == [UNAUTH] * 4
            assert await _list_models(channel, GOOD) == LOCKED
            assert [await _list_models(channel, f"more-{i}") for i in range(10)] == [LOCKED] * 10
            assert await _list_models(channel, None) == OK  # no token, no guess: not refused
        events = await _lockout_events(runtime)
    assert [e.detail["scope"] for e in events] == ["global"]
    assert events[0].detail["failures"] == 4 and events[0].detail["lockout_ms"] == 120_000


@pytest.mark.asyncio(loop_scope="session")
async def test_wrong_tokens_with_a_certificate_lock_that_certificate_out(tmp_path):
    from tests.server.test_principal_identities import _name, _Pki

    pki = _Pki(tmp_path)
    teller_a = pki.credentials(*pki.leaf(_name((NameOID.COMMON_NAME, "teller-a"))))
    teller_b = pki.credentials(*pki.leaf(_name((NameOID.COMMON_NAME, "teller-b"))))
    auth = {"max_failed_logins": 100, "max_failed_logins_per_principal": 2}
    async with _throttled_server(tmp_path, auth, pki) as (runtime, target):
        async with grpc.aio.secure_channel(target, teller_a) as a, grpc.aio.secure_channel(target, teller_b) as b:
            assert [await _list_models(a, f"guess-{i}") for i in range(2)] == [UNAUTH] * 2
            assert await _list_models(a, GOOD) == LOCKED
            assert await _list_models(a, None) == OK  # the certificate alone guesses nothing
            assert await _list_models(b, GOOD) == OK
        (event,) = await _lockout_events(runtime)
    assert event.detail["scope"] == "certificate" and event.detail["locked"] == "CN=teller-a"
