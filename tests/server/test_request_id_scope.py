"""Running request ids are scoped per owner (``Runtime.claim_request``): one principal's
running id is neither refused to nor abortable by another, and an anonymous caller owns its
requests together with its peer host (``inference.request_owner``), so anonymous callers on
other hosts cannot abort them. Each owner's request runs under its own engine id."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from engine_backends.protocol import CompletionChunk, FinishReason, GenerateInput, GenerationUpdate
from service.access.auth import hash_token
from service.frontends.grpc.server import Frontend
from service.lifecycle.server import open_audit
from service.lifecycle.wiring import shared_core
from service.runtime.state import ModelEntry, ModelState, Runtime
from service.settings.config import load_settings
from tests.server.fake_engine import FakeEngine
from tests.server.stubs import stubs
from xinserve.v1 import inference_pb2

ASYNC = pytest.mark.asyncio(loop_scope="session")
ALICE = (("authorization", "Bearer alice-token-0123456789"),)
BOB = (("authorization", "Bearer bob-token-0123456789ab"),)


class HoldingEngine(FakeEngine):
    """Generates one token, then holds each request until ``abort`` ends it (CANCELLED);
    refuses an engine request id that is already running, as one engine cannot run two."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.running: dict[str, asyncio.Event] = {}

    async def generate(self, request: GenerateInput) -> AsyncIterator[GenerationUpdate]:
        self._alive()
        rid = request.request_id
        assert rid not in self.running, f"engine request id {rid!r} is already running"
        stop = self.running[rid] = asyncio.Event()
        try:
            yield GenerationUpdate(rid, [CompletionChunk(0, "x", [7], None)], 1, 0, False)
            await stop.wait()
            yield GenerationUpdate(rid, [CompletionChunk(0, "", [], FinishReason.CANCELLED)], 1, 0, True)
        finally:
            self.running.pop(rid, None)

    async def abort(self, request_id: str) -> bool:
        stop = self.running.get(request_id)
        if stop is None:
            return False
        stop.set()
        return True


@pytest.fixture
async def server(tmp_path):
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(
        f"alice {hash_token(ALICE[0][1].split()[1])}\nbob {hash_token(BOB[0][1].split()[1])}\n", encoding="utf-8"
    )
    tokens.chmod(0o600)
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"plaintext": ["127.0.0.1:0", "[::1]:0"]},
            "metrics_listen": None,
            "auth": {"token_file": str(tokens)},
        }
    )
    runtime = Runtime(settings)
    runtime.audit = await open_audit(settings)
    frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    engine = HoldingEngine("m")
    channels: list[grpc.aio.Channel] = []
    try:
        await frontend.start()
        await engine.start()
        runtime.add_model(ModelEntry("m", "generate", tmp_path, engine))
        runtime.add_model(ModelEntry("e", "embed", tmp_path, FakeEngine("e", "embed")))
        await runtime.models["e"].engine.start()
        for name in ("m", "e"):
            await runtime.mark(runtime.models[name], ModelState.READY)
        await runtime.set_serving(True)
        v4, v6 = (frontend.ports["127.0.0.1:0"], frontend.ports["[::1]:0"])
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{v4}"), grpc.aio.insecure_channel(f"[::1]:{v6}")]
        yield stubs(channels[0]).inference, stubs(channels[1]).inference, engine
    finally:
        for channel in channels:
            await channel.close()
        await frontend.stop(0)
        await runtime.audit.close()


def generate(request_id: str) -> inference_pb2.GenerateRequest:
    return inference_pb2.GenerateRequest(model="m", prompt="hi", request_id=request_id)


async def started(api, request_id: str, metadata=()):
    """A GenerateStream whose first message arrived: the request is running."""
    call = api.GenerateStream(generate(request_id), metadata=metadata)
    first = await call.read()
    assert first.request_id == request_id and first.text == "x"
    return call


async def finish_reason_of(call) -> int:
    while True:
        message = await call.read()
        assert message is not grpc.aio.EOF, "no finish reason"
        if message.finish_reason:
            return message.finish_reason


@ASYNC
async def test_another_principals_running_id_is_neither_refused_nor_abortable(server):
    api, _, engine = server
    alices = await started(api, "tx-1", ALICE)
    bobs = await started(api, "tx-1", BOB)
    assert len(engine.running) == 2  # two engine requests, each under its own engine id
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await api.Generate(generate("tx-1"), metadata=ALICE)
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert (await api.Abort(inference_pb2.AbortRequest(request_id="tx-1"), metadata=BOB)).aborted
    await finish_reason_of(bobs)
    assert len(engine.running) == 1  # Alice's request still runs
    assert (await api.Abort(inference_pb2.AbortRequest(request_id="tx-1"), metadata=ALICE)).aborted
    await finish_reason_of(alices)
    assert not engine.running


@ASYNC
async def test_embed_follows_the_same_rule(server):
    api, _, _ = server
    alices = await started(api, "tx-2", ALICE)
    reply = await api.Embed(inference_pb2.EmbedRequest(model="e", inputs=["a"], request_id="tx-2"), metadata=BOB)
    assert reply.request_id == "tx-2"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await api.Embed(inference_pb2.EmbedRequest(model="e", inputs=["a"], request_id="tx-2"), metadata=ALICE)
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert (await api.Abort(inference_pb2.AbortRequest(request_id="tx-2"), metadata=ALICE)).aborted
    await finish_reason_of(alices)


@ASYNC
async def test_an_anonymous_caller_cannot_abort_an_anonymous_request_from_another_host(server):
    over_v4, over_v6, engine = server
    mine = await started(over_v4, "anon-1")
    # Another host (::1 is not 127.0.0.1): the id looks unknown and is free to use.
    assert not (await over_v6.Abort(inference_pb2.AbortRequest(request_id="anon-1"))).aborted
    assert len(engine.running) == 1
    theirs = await started(over_v6, "anon-1")
    assert (await over_v6.Abort(inference_pb2.AbortRequest(request_id="anon-1"))).aborted
    await finish_reason_of(theirs)
    assert len(engine.running) == 1
    # The caller on the request's own host may abort it.
    assert (await over_v4.Abort(inference_pb2.AbortRequest(request_id="anon-1"))).aborted
    await finish_reason_of(mine)
    assert not engine.running
