"""A request body that arrives slowly, or never, or whose client goes away while sending it.

The OpenAI front end receives a POST body before the call is admitted and within
``limits.http_body_timeout_s``: clients that stall mid-body hold no admission slot (other
calls, gRPC's included, still run), a stalled body is answered 408 in OpenAI's error shape
with its audit record (DEADLINE_EXCEEDED), and a client that disconnects while sending it is
recorded as CANCELLED, not INTERNAL. Raw sockets send the partial bodies; a real uvicorn
listener, call core and audit log run over fake engines (``tests.server.fake_http``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.runtime.state import Runtime
from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines, rpc_records

ASYNC = pytest.mark.asyncio(loop_scope="session")

MAX_IN_FLIGHT = 2
MAX_QUEUE = 1
PARTIAL = b'{"model":'
REST = b'"m","prompt":"hi","max_tokens":1}'
WAIT_S = 120.0
"""Upper bound on any wait for the server here (a loaded CI box is slow, never this slow)."""


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``XINSERVE_*`` settings for a listener started inside the block (read once, at start)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@asynccontextmanager
async def _served(
    tmp_path: Path, body_timeout_s: float, max_body_bytes: int = 65536
) -> AsyncIterator[tuple[int, Runtime]]:
    settings = {
        "XINSERVE_ADMISSION__MAX_IN_FLIGHT": str(MAX_IN_FLIGHT),
        "XINSERVE_ADMISSION__MAX_QUEUE": str(MAX_QUEUE),
        "XINSERVE_LIMITS__HTTP_BODY_TIMEOUT_S": str(body_timeout_s),
        "XINSERVE_LIMITS__MAX_HTTP_BODY_BYTES": str(max_body_bytes),
        # Stalled bodies here are held on purpose: the minimum upload rate is tested apart
        # (tests/openai/test_openai_body_reception_abuse.py).
        "XINSERVE_LIMITS__HTTP_BODY_MIN_RATE_BYTES_PER_S": "0",
    }
    with _environment(settings):
        server = http_over_fake_engines(tmp_path, [FakeEngine("m")])
        port, runtime = await server.__aenter__()
    try:
        assert runtime.settings.limits.http_body_timeout_s == body_timeout_s
        assert runtime.admission.max_in_flight == MAX_IN_FLIGHT
        yield port, runtime
    finally:
        await server.__aexit__(None, None, None)


def _head(request_id: str, endpoint: str = "completions") -> bytes:
    length = len(PARTIAL) + len(REST)
    return (
        f"POST /v1/{endpoint} HTTP/1.1\r\n"
        "Host: 127.0.0.1\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {length}\r\n"
        f"x-request-id: {request_id}\r\n"
        "\r\n"
    ).encode()


async def _stall(port: int, request_id: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that sent its headers and the start of its body, then stopped."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_head(request_id) + PARTIAL)
    await writer.drain()
    return reader, writer


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with suppress(OSError):
        await writer.wait_closed()


async def _response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], dict[str, Any]]:
    """(status, lower-case headers, JSON body) of one HTTP/1.1 response with a Content-Length."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), WAIT_S)
    return int(status_line.split()[1]), headers, json.loads(body)


@ASYNC
async def test_stalled_bodies_hold_no_admission_slot(tmp_path):
    # As many stalled clients as admission has slots and queue places, but one: were they
    # admitted while their bodies are pending, the normal request would wait behind them for
    # ever (the bodies being received are bounded too: see the next test).
    stalled_count = MAX_IN_FLIGHT + MAX_QUEUE - 1
    async with _served(tmp_path, body_timeout_s=600) as (port, runtime):
        stalled = [await _stall(port, f"stalled-{i}") for i in range(stalled_count)]
        try:
            async with httpx.AsyncClient(timeout=WAIT_S) as http:
                reply = await http.post(
                    f"http://127.0.0.1:{port}/v1/completions",
                    json={"model": "m", "prompt": "hi", "max_tokens": 1},
                    headers={"x-request-id": "normal"},
                )
            assert reply.status_code == 200, reply.text[:500]
            (record,) = await rpc_records(runtime, "normal", WAIT_S)
            assert record.outcome == "OK"
            assert runtime.admission.in_flight == 0
            assert runtime.admission.queued == 0
            # They were waiting for their bodies all along: finishing them completes each call.
            for i, (reader, writer) in enumerate(stalled):
                writer.write(REST)
                await writer.drain()
                status, headers, body = await _response(reader)
                assert status == 200, body
                assert headers["x-request-id"] == f"stalled-{i}"
                assert body["object"] == "text_completion"
            assert runtime.admission.in_flight == 0
        finally:
            for _, writer in stalled:
                await _close(writer)


@ASYNC
async def test_bodies_received_before_admission_are_bounded(tmp_path):
    # Bodies received before admission are buffered in memory: at most as many as admission
    # can hold (in flight + queued) at once; one more is refused at once, 429 with Retry-After.
    bound = MAX_IN_FLIGHT + MAX_QUEUE
    async with _served(tmp_path, body_timeout_s=600) as (port, runtime):
        stalled = [await _stall(port, f"held-{i}") for i in range(bound)]
        try:
            for _ in range(int(WAIT_S / 0.05)):
                if runtime.body_reception.receiving == bound:
                    break
                await asyncio.sleep(0.05)
            assert runtime.body_reception.receiving == bound
            async with httpx.AsyncClient(timeout=WAIT_S) as http:
                reply = await http.post(
                    f"http://127.0.0.1:{port}/v1/completions",
                    json={"model": "m", "prompt": "hi", "max_tokens": 1},
                    headers={"x-request-id": "one-too-many"},
                )
                assert reply.status_code == 429, reply.text[:500]
                assert reply.headers["retry-after"].isdigit()
                assert reply.json()["error"]["code"] == "body_reception_full"
                (record,) = await rpc_records(runtime, "one-too-many", WAIT_S)
                assert record.outcome == "RESOURCE_EXHAUSTED"
                assert runtime.admission.in_flight == 0
                # One stalled client goes away: its place is free again.
                await _close(stalled.pop()[1])
                for _ in range(int(WAIT_S / 0.05)):
                    if runtime.body_reception.receiving < bound:
                        break
                    await asyncio.sleep(0.05)
                reply = await http.post(
                    f"http://127.0.0.1:{port}/v1/completions",
                    json={"model": "m", "prompt": "hi", "max_tokens": 1},
                    headers={"x-request-id": "room-again"},
                )
                assert reply.status_code == 200, reply.text[:500]
        finally:
            for _, writer in stalled:
                await _close(writer)


@ASYNC
async def test_a_stalled_body_is_answered_408_and_audited(tmp_path):
    async with _served(tmp_path, body_timeout_s=0.5) as (port, runtime):
        reader, writer = await _stall(port, "slow-body")
        try:
            status, headers, body = await _response(reader)
            assert status == 408, body
            assert headers["x-request-id"] == "slow-body"
            assert headers["connection"] == "close"
            error = body["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["type"] == "invalid_request_error"
            assert error["code"] == "request_timeout"
            # The server closes the connection: the rest of the body can never be read as a request.
            assert await asyncio.wait_for(reader.read(), WAIT_S) == b""
        finally:
            await _close(writer)
        (record,) = await rpc_records(runtime, "slow-body", WAIT_S)
        assert record.outcome == "DEADLINE_EXCEEDED"
        assert record.method == "openai/completions"
        assert runtime.admission.in_flight == 0


@ASYNC
@pytest.mark.parametrize("endpoint", ["completions", "embeddings"])
async def test_a_client_that_disconnects_mid_body_is_recorded_cancelled(tmp_path, endpoint):
    async with _served(tmp_path, body_timeout_s=600) as (port, runtime):
        request_id = f"gone-{endpoint}"
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_head(request_id, endpoint) + PARTIAL)
        await writer.drain()
        await _close(writer)
        (record,) = await rpc_records(runtime, request_id, WAIT_S)
        assert record.outcome == "CANCELLED"
        assert record.method == f"openai/{endpoint}"
        assert runtime.admission.in_flight == 0


@ASYNC
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_a_body_over_the_limit_is_still_a_413_and_audited(tmp_path, declared):
    limit = 4096
    big = json.dumps({"model": "m", "prompt": "x" * limit}).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(big), 1024):
            yield big[start : start + 1024]

    async with _served(tmp_path, body_timeout_s=600, max_body_bytes=limit) as (port, runtime):
        request_id = f"big-{'declared' if declared else 'chunked'}"
        headers = {"content-type": "application/json", "x-request-id": request_id}
        async with httpx.AsyncClient(timeout=WAIT_S) as http:
            reply = await http.post(
                f"http://127.0.0.1:{port}/v1/completions", content=big if declared else chunks(), headers=headers
            )
        assert reply.status_code == 413, reply.text[:500]
        assert reply.json()["error"]["code"] == "request_too_large"
        (record,) = await rpc_records(runtime, request_id, WAIT_S)
        assert record.outcome == "RESOURCE_EXHAUSTED"
        assert runtime.admission.in_flight == 0
