"""Failed-login throttling (per peer host and per principal, with a lockout window) and token
expiry (``not_after`` in the token file)."""

from __future__ import annotations

import hashlib

import grpc
import pytest
from google.rpc import error_details_pb2

from service.access import login_throttle
from service.access.auth import AuthenticationFailed, Authenticator, TokenFileError, hash_token, load_token_file
from service.access.login_throttle import GLOBAL, LoginThrottle, certificate_key, peer_host, token_key
from service.core.status import RpcError
from tests.conftest import TINY
from tests.server.stubs import detail_of, stubs
from xinserve.v1 import inference_pb2

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
