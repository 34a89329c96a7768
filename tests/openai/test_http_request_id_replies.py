"""Every reply of the OpenAI listener carries an ``x-request-id`` (the client's valid one echoed,
else a new one): health probes, and the replies written before any call exists (bytes that are
not HTTP/1.1: 400; a head too large: 431; too many connections: 503), which are OpenAI error
objects. Over a real loopback socket, fake engines."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines

ASYNC = pytest.mark.asyncio(loop_scope="session")
LIMIT_S = 20.0
GENERATED = re.compile(r"[0-9a-f]{32}\Z")


async def _exchange(port: int, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``data`` on a new connection; the whole response up to the server's close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), LIMIT_S)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def _openai_error(headers: dict[str, str], body: bytes, code: str) -> None:
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code


@ASYNC
async def test_health_probes_answer_with_a_request_id(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")]) as (port, _):
        for method, path in (("GET", "/health"), ("GET", "/ping"), ("POST", "/ping"), ("GET", "/health/live")):
            request = f"{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 0\r\n"
            status, headers, _ = await _exchange(port, request.encode() + b"\r\n")
            assert status == 200, path
            assert GENERATED.match(headers["x-request-id"]), path
            status, headers, _ = await _exchange(port, request.encode() + b"x-request-id: probe-7\r\n\r\n")
            assert (status, headers["x-request-id"]) == (200, "probe-7"), path
            too_long = "a" * 129
            status, headers, _ = await _exchange(port, request.encode() + f"x-request-id: {too_long}\r\n\r\n".encode())
            assert status == 200 and GENERATED.match(headers["x-request-id"]), path


@ASYNC
async def test_a_request_that_is_not_http_gets_an_openai_error_with_a_request_id(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")]) as (port, _):
        status, headers, body = await _exchange(port, b"NOT HTTP AT ALL\r\n\r\n")
        assert (status, headers["connection"]) == (400, "close")
        _openai_error(headers, body, "invalid_http_request")
        assert GENERATED.match(headers["x-request-id"])
        # A head broken after a valid x-request-id echoes it.
        status, headers, body = await _exchange(
            port, b"POST /ping HTTP/1.1\r\nx-request-id: broken-1\r\ncontent-length: zz\r\n\r\n"
        )
        assert status == 400
        _openai_error(headers, body, "invalid_http_request")
        assert headers["x-request-id"] == "broken-1"


@ASYNC
async def test_connection_level_refusals_carry_a_request_id(tmp_path):
    limits = {"limits": {"max_http_connections_per_peer": 1, "http_header_timeout_s": 60}}
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")], limits) as (port, _):
        filler = b"x-big: " + b"a" * 100_000 + b"\r\n\r\n"
        status, headers, body = await _exchange(port, b"GET /health HTTP/1.1\r\nx-request-id: big-1\r\n" + filler)
        assert status == 431
        _openai_error(headers, body, "request_header_fields_too_large")
        assert headers["x-request-id"] == "big-1"
        status, headers, _ = await _exchange(port, b"GET /health HTTP/1.1\r\n" + filler)
        assert status == 431 and GENERATED.match(headers["x-request-id"])

        held_reader, held = await asyncio.open_connection("127.0.0.1", port)
        held.write(b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n")  # served, then kept alive
        await held.drain()
        assert b" 200 " in await asyncio.wait_for(held_reader.readuntil(b"\r\n\r\n"), LIMIT_S)
        try:
            status, headers, body = await _exchange(port, b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        finally:
            held.close()
        assert (status, headers["retry-after"]) == (503, "1")
        _openai_error(headers, body, "too_many_connections")
        assert GENERATED.match(headers["x-request-id"])
