"""A request that asks to switch protocols (``Upgrade: h2c``, as curl --http2 and the JDK's
HttpClient send on http:// URLs) is served by the OpenAI front end as HTTP/1.1, with its
body, and the connection goes on as HTTP/1.1 (RFC 9110 section 7.8 lets a server ignore
Upgrade). Raw sockets against the real uvicorn listener; the engine is a fake (no
generation is needed to see the body arrive)."""

from __future__ import annotations

import asyncio
import json

import pytest

from audit import QueryFilter
from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines

ASYNC = pytest.mark.asyncio(loop_scope="session")

UPGRADE = b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n"
BODY = json.dumps({"model": "m", "prompt": "hello", "max_tokens": 1}).encode()


def _post(body: bytes, framing: bytes) -> bytes:
    return b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" + UPGRADE + framing


def _chunked(body: bytes) -> bytes:
    half = len(body) // 2
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:half], body[half:])) + b"0\r\n\r\n"


LAST = b"GET /health/live HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"

CASES = {
    # head and body in one segment, then a second request on the same connection
    "content-length": [_post(BODY, b"Content-Length: %d\r\n\r\n" % len(BODY)) + BODY + LAST],
    # the body arrives after the head, in two more segments
    "split": [
        _post(BODY, b"Content-Length: %d\r\n\r\n" % len(BODY)),
        BODY[:10],
        BODY[10:] + LAST,
    ],
    "chunked": [_post(BODY, b"Transfer-Encoding: chunked\r\n\r\n") + _chunked(BODY) + LAST],
}


def _responses(raw: bytes) -> list[tuple[bytes, bytes]]:
    """(status line, body) of each Content-Length-framed response in ``raw``."""
    out = []
    while raw:
        head, _, raw = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        fields = dict(line.partition(b":")[::2] for line in lines[1:])
        length = int(next(v for k, v in fields.items() if k.lower() == b"content-length"))
        out.append((lines[0], raw[:length]))
        raw = raw[length:]
    return out


@pytest.fixture
async def http_port(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")]) as served:
        yield served


@ASYNC
@pytest.mark.parametrize("case", list(CASES))
async def test_h2c_upgrade_request_is_served_with_its_body(http_port, case):
    port, runtime = http_port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for segment in CASES[case]:
            writer.write(segment)
            await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 60)
    finally:
        writer.close()
    responses = _responses(raw)
    assert [status for status, _ in responses] == [b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK"], raw
    completion = json.loads(responses[0][1])
    assert completion["object"] == "text_completion"
    assert completion["choices"][0]["text"] == "x"
    # The audit record may be appended just after the reply is sent: wait for it.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while not (rows := await runtime.audit.log.query(QueryFilter(method="openai/completions", event="rpc"))):
        assert loop.time() < deadline, "no audit record for the upgrade request"
        await asyncio.sleep(0.05)
    assert len(rows) == 1
