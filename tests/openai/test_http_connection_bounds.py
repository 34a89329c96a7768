"""The OpenAI listener bounds what a connection can hold before any call exists (so before
authentication): request heads (431), slow or absent heads (408), connections at once per
client address and in all (503). Loopback only, fake engines, bounded in time and count."""

from __future__ import annotations

import asyncio
import json

import psutil
import pytest
from prometheus_client import REGISTRY

from service.frontends.openai.connections import DESCRIPTOR_RESERVE, connection_cap
from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import http_over_fake_engines

ASYNC = pytest.mark.asyncio(loop_scope="session")
LIMIT_S = 20.0


def _refused(reason: str) -> float:
    return REGISTRY.get_sample_value("xinserve_http_connections_refused_total", {"reason": reason}) or 0.0


async def _response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], dict]:
    """Read one whole response and the end of the connection (fails past LIMIT_S)."""
    raw = await asyncio.wait_for(reader.read(), LIMIT_S)  # until EOF: the server closes
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body) if body else {}


async def _get_models(port: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    await writer.drain()
    status, _, _ = await _response(reader)
    writer.close()
    return status


@ASYNC
async def test_a_request_head_past_the_limit_is_refused_with_431(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")]) as (port, _):
        before = _refused("header_too_large")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        filler = b"".join(b"x-filler-%05d: %s\r\n" % (i, b"a" * 1000) for i in range(70))  # ~70 KiB
        writer.write(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n" + filler)
        await writer.drain()
        status, headers, body = await _response(reader)
        writer.close()
        assert (status, headers["connection"]) == (431, "close")
        assert body["error"]["code"] == "request_header_fields_too_large"
        assert _refused("header_too_large") == before + 1
        # A whole oversized head in one write (parsed in one read) is refused too, as are a long
        # request line and many small headers.
        for head in (
            b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 100_000 + b"\r\n\r\n",
            b"GET /v1/models?" + b"q" * 70_000 + b" HTTP/1.1\r\nhost: x\r\n\r\n",
            b"GET /v1/models HTTP/1.1\r\n" + b"".join(b"h%d: v\r\n" % i for i in range(12_000)) + b"\r\n",
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head)
            await writer.drain()
            assert (await _response(reader))[0] == 431
            writer.close()
        # A head within the limit is served as before.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n" + filler[:60_000] + b"\r\n\r\n")
        await writer.drain()
        assert (await _response(reader))[0] == 200
        writer.close()


async def _flood_headers(port: int, total: int) -> int:
    """Send up to ``total`` bytes of headers; returns how many the server took before closing."""
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = 0
    piece = b"".join(b"x-flood-%03d: %s\r\n" % (i, b"b" * 1000) for i in range(64))
    writer.write(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n")
    try:
        while sent < total:
            writer.write(piece)
            await asyncio.wait_for(writer.drain(), LIMIT_S)
            sent += len(piece)
    except (ConnectionError, TimeoutError):
        pass
    writer.close()
    return sent


@ASYNC
async def test_many_connections_sending_huge_heads_leave_memory_flat(tmp_path):
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")]) as (port, _):
        process = psutil.Process()
        rss_before = process.memory_info().rss
        taken = await asyncio.gather(*(_flood_headers(port, 32 * 1024 * 1024) for _ in range(8)))
        rss_after = process.memory_info().rss
        # Without a bound the server buffered all 8 x 32 MiB; with it each connection ends after
        # the 64 KiB limit plus what the sockets' buffers held.
        assert all(t < 32 * 1024 * 1024 for t in taken), taken
        assert rss_after - rss_before < 64 * 1024 * 1024, (rss_before, rss_after)
        assert await _get_models(port) == 200


@ASYNC
async def test_a_connection_without_a_complete_head_is_closed_with_408(tmp_path):
    limits = {"limits": {"http_header_timeout_s": 0.5}}
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")], limits) as (port, _):
        before = _refused("header_timeout")
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)  # sends nothing
        drip_reader, drip_writer = await asyncio.open_connection("127.0.0.1", port)

        async def drip() -> None:
            drip_writer.write(b"GET /v1/models HTTP/1.1\r\n")
            for _ in range(int(LIMIT_S / 0.1)):
                if drip_writer.is_closing() or drip_reader.at_eof():
                    return
                try:
                    drip_writer.write(b"x")
                    await drip_writer.drain()
                except ConnectionError:
                    return
                await asyncio.sleep(0.1)

        dripping = asyncio.create_task(drip())
        assert (await _response(idle_reader))[0] == 408
        assert (await _response(drip_reader))[0] == 408
        dripping.cancel()
        idle_writer.close()
        drip_writer.close()
        assert _refused("header_timeout") == before + 2
        assert await _get_models(port) == 200


@ASYNC
async def test_connections_past_the_per_peer_and_global_caps_get_503(tmp_path):
    limits = {"limits": {"max_http_connections_per_peer": 3, "http_header_timeout_s": 60}}
    async with http_over_fake_engines(tmp_path, [FakeEngine("m")], limits) as (port, _):
        before = _refused("peer_connection_limit")
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        await asyncio.sleep(0)  # let the server see them
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        status, headers, body = await _response(reader)
        writer.close()
        assert (status, headers["retry-after"], body["error"]["code"]) == (503, "1", "too_many_connections")
        assert _refused("peer_connection_limit") == before + 1
        held.pop()[1].close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LIMIT_S
        while (status := await _get_models(port)) == 503:  # until the server saw the close
            assert loop.time() < deadline
            await asyncio.sleep(0.05)
        assert status == 200
        for _, w in held:
            w.close()
    limits = {"limits": {"max_http_connections": 2, "http_header_timeout_s": 60}}
    async with http_over_fake_engines(tmp_path / "global", [FakeEngine("m")], limits) as (port, _):
        before = _refused("connection_limit")
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert (await _response(reader))[0] == 503
        writer.close()
        assert _refused("connection_limit") == before + 1
        for _, w in held:
            w.close()


def test_the_cap_leaves_descriptors_for_everything_else():
    assert connection_cap(4096, 1_048_576) == 4096
    assert connection_cap(4096, 1024) == 1024 - DESCRIPTOR_RESERVE
    assert connection_cap(4096, 100) == 1
