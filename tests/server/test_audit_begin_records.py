"""Calls that produce output (Generate, Chat, their streams, and the OpenAI front end's
completions) leave a durable ``rpc_begin`` record before their first output reaches the
client, then exactly one ``rpc`` record; other calls (Tokenize, ListModels) only the ``rpc``."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest

from audit import QueryFilter, decode_record
from engine_backends.protocol import CompletionChunk, FinishReason, GenerateInput, GenerationUpdate
from service.frontends.grpc.server import Frontend
from service.frontends.openai.listener import HttpFrontend
from service.lifecycle.server import open_audit
from service.lifecycle.wiring import shared_core
from service.runtime.state import ModelEntry, ModelState, Runtime
from service.settings.config import load_settings
from tests.server.fake_engine import FakeEngine
from tests.server.stubs import stubs
from xinserve.v1 import common_pb2, inference_pb2, model_pb2

ASYNC = pytest.mark.asyncio(loop_scope="session")


class GatedEngine(FakeEngine):
    """Sends one token, then waits for ``gate`` before the final one (when a gate is set)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.gate: asyncio.Event | None = None

    async def generate(self, request: GenerateInput) -> AsyncIterator[GenerationUpdate]:
        self._alive()
        yield GenerationUpdate(request.request_id, [CompletionChunk(0, "x", [7], None)], 1, 0, False)
        if self.gate is not None:
            await self.gate.wait()
        yield GenerationUpdate(request.request_id, [CompletionChunk(0, "y", [8], FinishReason.LENGTH)], 1, 0, True)


async def _events(runtime: Runtime, request_id: str) -> list[str]:
    rows = await runtime.audit.log.query(QueryFilter())
    return [r.event for r in (decode_record(row.body)[2] for row in rows) if r.request_id == request_id]


@pytest.fixture
async def server(tmp_path):
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path),
            "listen": {"plaintext": ["127.0.0.1:0"], "http": ["127.0.0.1:0"]},
            "metrics_listen": None,
        }
    )
    runtime = Runtime(settings)
    runtime.audit = await open_audit(settings)
    frontend = Frontend(*shared_core(runtime, settings), settings, "cpu")
    await frontend.start()
    http = HttpFrontend(frontend.core, frontend.inference, settings)
    await http.start()
    engine = GatedEngine("m")
    await engine.start()
    runtime.add_model(ModelEntry("m", "generate", tmp_path, engine, manifest_digest="sm3:" + "ab" * 32))
    await runtime.mark(runtime.models["m"], ModelState.READY)
    await runtime.set_serving(True)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{next(iter(frontend.ports.values()))}")
    api = stubs(channel)
    try:
        yield api, runtime, engine, f"http://127.0.0.1:{next(iter(http.ports.values()))}/v1"
    finally:
        await api.close()
        await http.stop()
        await frontend.stop(0)
        await runtime.audit.close()


@ASYNC
async def test_output_calls_have_begin_then_one_end_and_others_only_an_end(server):
    api, runtime, _, base = server
    md = {}
    for name in ("gen", "chat", "gen_stream", "chat_stream", "tokenize", "models"):
        md[name] = (("x-request-id", f"{name}-{uuid.uuid4().hex[:8]}"),)
    prompt = inference_pb2.GenerateRequest(model="m", prompt="hi")
    chat = inference_pb2.ChatRequest(model="m", messages=[common_pb2.ChatMessage(role="user", content="hi")])
    await api.inference.Generate(prompt, metadata=md["gen"])
    await api.inference.Chat(chat, metadata=md["chat"])
    assert len([m async for m in api.inference.GenerateStream(prompt, metadata=md["gen_stream"])]) == 2
    assert len([m async for m in api.inference.ChatStream(chat, metadata=md["chat_stream"])]) == 2
    await api.inference.Tokenize(inference_pb2.TokenizeRequest(model="m", text="hi"), metadata=md["tokenize"])
    await api.models.ListModels(model_pb2.ListModelsRequest(), metadata=md["models"])
    async with httpx.AsyncClient(base_url=base) as http:
        for path, body in (
            ("/completions", {"model": "m", "prompt": "hi", "stream": True}),
            ("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        ):
            rid = f"http-{uuid.uuid4().hex[:8]}"
            reply = await http.post(path, json=body, headers={"x-request-id": rid})
            assert reply.status_code == 200, reply.text
            md[path] = (("x-request-id", rid),)
    for name, meta in md.items():
        expected = ["rpc"] if name in ("tokenize", "models") else ["rpc_begin", "rpc"]
        assert await _events(runtime, meta[0][1]) == expected, name


@ASYNC
async def test_begin_is_durable_before_the_first_output_reaches_the_client(server):
    api, runtime, engine, base = server
    engine.gate = asyncio.Event()
    rid = f"gated-{uuid.uuid4().hex[:8]}"
    call = api.inference.GenerateStream(
        inference_pb2.GenerateRequest(model="m", prompt="hi"), metadata=(("x-request-id", rid),)
    )
    first = await call.read()
    assert first.text == "x"
    assert await _events(runtime, rid) == ["rpc_begin"]
    engine.gate.set()
    last = await call.read()
    assert last.text == "y"
    assert await call.read() is grpc.aio.EOF
    assert await _events(runtime, rid) == ["rpc_begin", "rpc"]

    engine.gate = asyncio.Event()
    rid = f"gated-http-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=base) as http:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        async with http.stream("POST", "/chat/completions", json=body, headers={"x-request-id": rid}) as reply:
            lines = reply.aiter_lines()
            async for line in lines:
                if line.startswith("data: ") and json.loads(line[6:])["choices"]:
                    break
            assert await _events(runtime, rid) == ["rpc_begin"]
            engine.gate.set()
            assert [line async for line in lines if line.startswith("data: ")][-1] == "data: [DONE]"
    assert await _events(runtime, rid) == ["rpc_begin", "rpc"]
