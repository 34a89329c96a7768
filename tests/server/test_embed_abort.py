"""Embed follows the request-id rules of every inference call: it can be aborted by its id,
and an id that is running (an Embed's or a Generate's) is refused with ALREADY_EXISTS."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2

from tests.conftest import MINILM, TINY
from tests.server.stubs import detail_of
from xinserve.v1 import inference_pb2

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.engine]

# Long enough that the engine is still embedding when Abort arrives (1024 inputs of ~250 tokens).
_INPUTS = [f"document {i}: " + "the quick brown fox jumps over the lazy dog " * 25 for i in range(1024)]


async def _until(condition, what: str, limit_s: float = 300.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def test_embed_is_aborted_by_its_request_id_and_its_id_is_taken_while_it_runs(api, live_server):
    rid = "embed-abort-1"
    running = asyncio.ensure_future(
        api.inference.Embed(inference_pb2.EmbedRequest(model=MINILM, inputs=_INPUTS, request_id=rid))
    )
    await _until(lambda: rid in live_server.runtime.active_requests or running.done(), "the Embed to run")
    assert not running.done(), "the Embed ended before it could be aborted"

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.inference.Generate(inference_pb2.GenerateRequest(model=TINY, prompt="hi", request_id=rid))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.inference.Embed(inference_pb2.EmbedRequest(model=MINILM, inputs=["x"], request_id=rid))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS

    reply = await api.inference.Abort(inference_pb2.AbortRequest(request_id=rid))
    assert reply.aborted
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await running
    assert err.value.code() == grpc.StatusCode.CANCELLED
    assert detail_of(err.value, error_details_pb2.ErrorInfo).reason == "ABORTED"
    assert rid not in live_server.runtime.active_requests
    again = await api.inference.Embed(inference_pb2.EmbedRequest(model=MINILM, inputs=["x"], request_id=rid))
    assert len(again.embeddings) == 1
