"""Many slow uploads from one client address do not shut the OpenAI API for everyone else.

Request bodies are received before admission, in slots bounded in all, per client address and
per identified principal (``service.core.body_reception``); a body slower than the minimum upload
rate is dropped (408); refusals are counted by reason and audited once per address, reason
and interval, not once each. Raw sockets from 127.0.0.1 play the attacker, a client bound to
127.0.0.2 (also loopback) the legitimate caller, against a real uvicorn listener, call core
and audit log over fake engines. Every wait is bounded; the assertions are on the audit
store's records and the server's counters, not on timings.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from audit import QueryFilter
from audit.records import decode_record
from service.access.auth import hash_token
from service.core import body_reception
from service.core.body_reception import BodyReception
from service.core.status import RpcError
from service.runtime.state import Runtime
from tests.openai.test_openai_slow_body import PARTIAL, _close, _head, _response
from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines, rpc_records

ASYNC = pytest.mark.asyncio(loop_scope="session")
WAIT_S = 60.0
"""Upper bound on any wait for the server here."""
SLOTS = 8  # admission: 2 in flight + 6 queued
PER_PEER = 4
ATTACKERS = 8


def _overrides(min_rate: int, grace_s: float) -> dict[str, Any]:
    return {
        "admission": {"max_in_flight": 2, "max_queue": SLOTS - 2},
        "limits": {
            "http_body_timeout_s": 600,
            "max_http_bodies_per_peer": PER_PEER,
            "http_body_min_rate_bytes_per_s": min_rate,
            "http_body_rate_grace_s": grace_s,
            "http_refusal_audit_interval_s": 3600,
        },
    }


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    value = REGISTRY.get_sample_value(name, labels or {})
    return value or 0.0


def _refusals(reason: str) -> float:
    return _sample("xinserve_http_body_refusals_total", {"reason": reason})


async def _records(runtime: Runtime, outcome: str) -> int:
    rows = await runtime.audit.log.query(QueryFilter(event="rpc"))
    return sum(1 for row in rows if decode_record(row.body)[2].outcome == outcome)


async def _until(check, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not check():
        assert loop.time() < deadline, f"not within {WAIT_S} s: {what}"
        await asyncio.sleep(0.02)


async def _slow_upload(
    port: int, request_id: str, token: str | None = None, source: str = "127.0.0.1"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """From ``source``: a head (with ``token`` as bearer token) and the first bytes of a body,
    then nothing more."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    head = _head(request_id)
    if token is not None:
        head = head.replace(b"\r\n\r\n", f"\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    writer.write(head + PARTIAL)
    await writer.drain()
    return reader, writer


@ASYNC
async def test_slow_uploads_from_one_address_leave_the_api_to_others(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")], _overrides(0, 10.0)) as (port, runtime):
        reception = runtime.body_reception
        shared_before = _refusals("body_reception_peer_share")
        gone_before = _refusals("client_disconnected")
        held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        try:
            for i in range(ATTACKERS):
                held.append(await _slow_upload(port, f"slow-{i}"))
                await _until(
                    lambda i=i: reception.receiving + _refusals("body_reception_peer_share") - shared_before > i,
                    "the upload was received or refused",
                )
            assert reception.by_peer["127.0.0.1"] == PER_PEER == reception.receiving
            assert _sample("xinserve_http_bodies_receiving") == PER_PEER
            # The uploads past the address's share were answered at once: 429 with Retry-After.
            refused = []
            for reader, writer in held[PER_PEER:]:
                status, headers, body = await _response(reader)
                assert (status, body["error"]["code"]) == (429, "body_reception_peer_share"), body
                assert headers["retry-after"].isdigit()
                refused.append(writer)
            # Another address is served while the attacker holds its share.
            transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
            async with httpx.AsyncClient(transport=transport, timeout=WAIT_S) as http:
                reply = await http.post(
                    f"http://127.0.0.1:{port}/v1/completions",
                    json={"model": "m", "prompt": "hi", "max_tokens": 1},
                    headers={"x-request-id": "legitimate"},
                )
            assert reply.status_code == 200, reply.text[:500]
            (record,) = await rpc_records(runtime, "legitimate", WAIT_S)
            assert (record.outcome, record.peer.split(":")[1]) == ("OK", "127.0.0.2")

            # The attacker keeps trying: every attempt is refused and counted...
            for i in range(ATTACKERS):
                reader, writer = await _slow_upload(port, f"again-{i}")
                status, _, body = await _response(reader)
                assert (status, body["error"]["code"]) == (429, "body_reception_peer_share")
                await _close(writer)
            assert _refusals("body_reception_peer_share") - shared_before == 2 * ATTACKERS - PER_PEER
            # ... and the attacker leaving mid-body is counted too.
            for _, writer in held[:PER_PEER]:
                await _close(writer)
            await _until(lambda: reception.receiving == 0, "the held uploads were released")
            await _until(lambda: _refusals("client_disconnected") - gone_before == PER_PEER, "disconnects counted")
            # 12 refusals of one kind and 4 of another from one address: one audit record each.
            for outcome in ("RESOURCE_EXHAUSTED", "CANCELLED"):
                for _ in range(int(WAIT_S / 0.05)):
                    if await _records(runtime, outcome):
                        break
                    await asyncio.sleep(0.05)
                assert await _records(runtime, outcome) == 1, outcome
            assert await _records(runtime, "OK") == 1
        finally:
            for _, writer in held:
                await _close(writer)


@ASYNC
async def test_a_body_slower_than_the_minimum_rate_is_dropped(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")], _overrides(500, 1.0)) as (port, runtime):
        reader, writer = await _slow_upload(port, "too-slow")
        try:
            status, headers, body = await _response(reader)  # long before http_body_timeout_s (600 s)
            assert status == 408, body
            assert (body["error"]["code"], headers["connection"]) == ("request_body_too_slow", "close")
            (record,) = await rpc_records(runtime, "too-slow", WAIT_S)
            assert record.outcome == "DEADLINE_EXCEEDED"
        finally:
            await _close(writer)
        async with httpx.AsyncClient(timeout=WAIT_S) as http:
            reply = await http.post(f"http://127.0.0.1:{port}/v1/completions", json={"model": "m", "prompt": "hi"})
        assert reply.status_code == 200, reply.text[:500]
        assert runtime.body_reception.receiving == 0


@ASYNC
async def test_a_token_holder_has_one_share_across_addresses(tmp_path):
    token = "alice-token-0123456789"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {hash_token(token)} user\n")
    tokens.chmod(0o600)
    overrides = _overrides(0, 10.0)
    overrides["limits"]["max_http_bodies_per_principal"] = 2
    overrides["auth"] = {"token_file": str(tokens)}
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")], overrides) as (port, runtime):
        reception = runtime.body_reception
        held = [await _slow_upload(port, f"alice-{i}", token) for i in range(2)]
        try:
            await _until(lambda: reception.by_principal["alice"] == 2, "alice's uploads were received")
            for source in ("127.0.0.1", "127.0.0.2"):
                reader, writer = await _slow_upload(port, f"alice-more-{source}", token, source)
                status, _, body = await _response(reader)
                assert (status, body["error"]["code"]) == (429, "body_reception_principal_share"), body
                await _close(writer)
            # An anonymous caller from the same address is not counted against alice.
            async with httpx.AsyncClient(timeout=WAIT_S) as http:
                reply = await http.post(
                    f"http://127.0.0.1:{port}/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 1}
                )
            assert reply.status_code == 200, reply.text[:500]
            assert reception.by_peer["127.0.0.1"] == 2
        finally:
            for _, writer in held:
                await _close(writer)


def test_an_identified_principal_has_its_own_share_anonymous_callers_their_address():
    reception = BodyReception(max_total=10, max_per_peer=3, max_per_principal=2, retry_after_s=1, audit_interval_s=60)
    with reception.slot("10.0.0.1", "alice"), reception.slot("10.0.0.2", "alice"):
        with pytest.raises(RpcError) as err:
            with reception.slot("10.0.0.3", "alice"):
                pass
        assert err.value.reason == "BODY_RECEPTION_PRINCIPAL_SHARE"
        with reception.slot("10.0.0.3", "bob"), reception.slot("10.0.0.3", None), reception.slot("10.0.0.3", None):
            with pytest.raises(RpcError) as err:
                with reception.slot("10.0.0.3", None):
                    pass
            assert err.value.reason == "BODY_RECEPTION_PEER_SHARE"
    assert (reception.receiving, dict(reception.by_peer), dict(reception.by_principal)) == (0, {}, {})


def test_refusals_are_audited_once_per_address_reason_and_interval(monkeypatch):
    now = [1000.0]

    class Clock:
        @staticmethod
        def monotonic() -> float:
            return now[0]

    monkeypatch.setattr(body_reception, "time", Clock)
    reception = BodyReception(max_total=1, max_per_peer=1, max_per_principal=1, retry_after_s=1, audit_interval_s=60)
    assert reception.refused("10.0.0.1", "REQUEST_TIMEOUT") == 0  # the first: audited
    assert [reception.refused("10.0.0.1", "REQUEST_TIMEOUT") for _ in range(100)] == [None] * 100
    assert reception.refused("10.0.0.1", "BODY_RECEPTION_PEER_SHARE") == 0  # another kind
    assert reception.refused("10.0.0.2", "REQUEST_TIMEOUT") == 0  # another address
    now[0] += 60
    assert reception.refused("10.0.0.1", "REQUEST_TIMEOUT") == 100  # next interval: counts those not audited
    assert reception.refused("10.0.0.1", "REQUEST_TIMEOUT") is None
