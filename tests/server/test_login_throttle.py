"""Failed-login throttling (per peer host and per principal, with a lockout window) and token
expiry (``not_after`` in the token file)."""

from __future__ import annotations

import hashlib
from contextlib import asynccontextmanager

import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID
from google.rpc import error_details_pb2

from audit import QueryFilter, decode_record
from service.access import login_throttle
from service.access.auth import AuthenticationFailed, Authenticator, TokenFileError, hash_token, load_token_file
from service.access.login_throttle import GLOBAL, LoginThrottle, certificate_key, peer_host, token_key
from service.core.status import RpcError
from service.frontends.grpc.server import Frontend
from service.lifecycle.wiring import shared_core
from service.runtime.state import Runtime
from service.settings.config import load_settings
from tests.conftest import TINY
from tests.server.stubs import detail_of, stubs
from xinserve.v1 import inference_pb2, model_pb2, model_pb2_grpc

GOOD = "throttle-good-0123456789"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_lockout_after_max_failures_within_the_window():
    clock = Clock()
    throttle = LoginThrottle(3, window_s=60, lockout_s=300, clock=clock)
    throttle.failed("peer:a")
    clock.now += 61  # the first failure leaves the window
    throttle.failed("peer:a")
    throttle.failed("peer:a")
    throttle.check("peer:a")  # two failures in the window: not locked
    throttle.failed("peer:a")
    with pytest.raises(RpcError) as locked:
        throttle.check("peer:b", "peer:a")
    assert locked.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and locked.value.reason == "LOGIN_THROTTLED"
    assert locked.value.retry_after_s == pytest.approx(300)
    clock.now += 299
    with pytest.raises(RpcError):
        throttle.check("peer:a")
    clock.now += 2
    throttle.check("peer:a")  # the lockout is over
    throttle.check("peer:b")
    assert peer_host("ipv4:127.0.0.1:5000") == "127.0.0.1"
    assert peer_host("ipv6:[::1]:5000") == "::1"


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("ipv4:127.0.0.1:5000", "127.0.0.1"),
        ("ipv6:[::1]:5000", "::1"),
        ("ipv6:%5B::1%5D:5000", "::1"),
        ("ipv6:%5B2001:db8::7%5D:443", "2001:db8::7"),
        ("unix:/run/xinserve.sock", "unix"),
        ("ipv4:10.0.0.1:1", "10.0.0.1"),
    ],
)
def test_peer_host_of_grpc_peers(peer, host):
    """gRPC writes IPv6 peers with percent-encoded brackets; one host per client address."""
    assert peer_host(peer) == host


def test_token_not_after(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(
        f"old {hash_token('old-token-0123456789')} user not_after=2020-01-01T00:00:00Z\n"
        f"new {hash_token('new-token-0123456789')} not_after=2999-01-01T00:00:00+08:00\n"
    )
    auth = Authenticator(load_token_file(path), required=True)
    with pytest.raises(AuthenticationFailed, match="expired") as expired:
        auth.authenticate("Bearer old-token-0123456789", {})
    assert expired.value.principal == "old"
    assert auth.authenticate("Bearer new-token-0123456789", {}).name == "new"
    path.write_text(f"x {hash_token('t')} user not_after=2020-01-01\n")
    with pytest.raises(TokenFileError, match="time zone"):
        load_token_file(path)
    path.write_text(f"x {hash_token('t')} not_after=yesterday\n")
    with pytest.raises(TokenFileError, match="RFC 3339"):
        load_token_file(path)


@pytest.mark.asyncio(loop_scope="session")
async def test_wrong_tokens_lock_the_peer_out(live_server, tmp_path):
    from tests.server.frontends import extra_frontend  # needs vLLM; the tests above run without it

    tokens = tmp_path / "tokens"
    tokens.write_text(f"svc {hash_token(GOOD)} user\n")
    tokens.chmod(0o600)  # a group- or world-readable token file is refused
    overrides = {
        "listen": {"plaintext": ["127.0.0.1:0"]},
        "auth": {"token_file": str(tokens), "max_failed_logins": 3, "lockout_s": 3600},
    }
    request = inference_pb2.TokenizeRequest(model=TINY, text="hi")
    async with extra_frontend(live_server, overrides) as (_, _, port):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            api = stubs(channel)
            assert (await api.inference.Tokenize(request, metadata=(("authorization", f"Bearer {GOOD}"),))).token_ids
            for i in range(3):
                with pytest.raises(grpc.aio.AioRpcError) as wrong:
                    await api.inference.Tokenize(request, metadata=(("authorization", f"Bearer guess-{i}"),))
                assert wrong.value.code() == grpc.StatusCode.UNAUTHENTICATED
            # Locked out: even the right token is refused until the lockout ends.
            with pytest.raises(grpc.aio.AioRpcError) as locked:
                await api.inference.Tokenize(request, metadata=(("authorization", f"Bearer {GOOD}"),))
            assert locked.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            retry = detail_of(locked.value, error_details_pb2.RetryInfo)
            assert retry is not None and retry.retry_delay.seconds > 3000
            # A call without a token guesses nothing: the peer's lockout does not refuse it
            # (this front end admits anonymous callers).
            assert (await api.inference.Tokenize(request)).token_ids


def test_principal_and_global_budgets_and_lockouts_reported_once():
    clock = Clock()
    throttle = LoginThrottle(
        100, window_s=60, lockout_s=300, clock=clock, max_principal_failures=2, max_global_failures=5
    )
    assert throttle.failed(GLOBAL, "peer:a", "token:aa") == []
    (token,) = throttle.failed(GLOBAL, "peer:b", "token:aa")  # the same token from another address
    assert (token.key, token.scope, token.failures, token.lockout_s) == ("token:aa", "token", 2, 300)
    with pytest.raises(RpcError):
        throttle.check("peer:c", "token:aa")
    throttle.check("peer:a", "peer:b", "token:bb")  # the peers are far from their budget
    assert throttle.failed(GLOBAL, "peer:c", "certificate:CN=x") == []
    assert throttle.failed(GLOBAL, "peer:d") == []
    (everyone,) = throttle.failed(GLOBAL, "peer:e")
    assert everyone.scope == "global" and everyone.failures == 5
    with pytest.raises(RpcError) as locked:
        throttle.check(GLOBAL, "peer:z")
    assert locked.value.reason == "LOGIN_THROTTLED"
    # A key already locked out starts no second lockout, however many failures follow.
    assert throttle.failed("token:aa") == [] and throttle.failed("token:aa") == []
    clock.now += 301
    throttle.check(GLOBAL, "token:aa")


def test_without_a_global_budget_no_global_lockout():
    throttle = LoginThrottle(1000, window_s=60, lockout_s=300)
    for _ in range(2000):
        throttle.failed(GLOBAL)
    throttle.check(GLOBAL)


def test_tracked_keys_are_bounded(monkeypatch):
    monkeypatch.setattr(login_throttle, "MAX_TRACKED_KEYS", 100)
    clock = Clock()
    throttle = LoginThrottle(2, window_s=60, lockout_s=300, clock=clock)
    for i in range(1000):  # every guess a new token: one key each
        throttle.failed(f"token:{i:016x}")
    assert len(throttle._failures) <= 100
    for i in range(1000):
        throttle.failed(f"peer:{i}")
        throttle.failed(f"peer:{i}")
    assert len(throttle._locked_until) <= 100


def test_credential_keys():
    assert token_key("Bearer abc") == "token:" + hashlib.sha256(b"abc").hexdigest()[:16]
    assert token_key("Basic abc") is None and token_key("Bearer  ") is None
    assert certificate_key("ab" * 32, "CN=teller-7,O=Bank") == "certificate:CN=teller-7,O=Bank"
    assert certificate_key("ab" * 32, "") == "certificate:sha256:" + "ab" * 32
    assert certificate_key(None, None) is None


@asynccontextmanager
async def _throttled_server(tmp_path, auth: dict, pki=None):
    """A gRPC front end with a token file holding GOOD (principal ``svc``), a real audit log and
    the given ``auth`` settings; with ``pki`` (``_Pki``) a TLS listener requiring client
    certificates. Yields (runtime, target)."""
    from service.lifecycle.server import open_audit  # imports the engine stack

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
