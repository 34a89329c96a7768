"""Streaming stays exact when several tokens leave as one message.

When the consumer is behind, vLLM's ``RequestOutputCollector`` merges the DELTA outputs of a
request (text, token ids, logprobs concatenated; the last finish reason kept) and the front
end sends the merged delta as one message. These tests check that the stream still adds up
to the unary answer: the same text, token ids and logprobs, ``finish_reason`` once on the
last message, usage on the last message only.

* With a fake engine that sends deltas of several tokens (as merged outputs are), exactly.
* With the session's real engine, once: the test blocks the event loop that runs the server
  for a while mid-stream (the engine core keeps generating in its own process), so that the
  engine's outputs pile up and are merged; how many messages that makes depends on timing, so
  only the exactness is asserted (every outcome from one message per token to fewer is valid).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
import pytest

from engine_backends.protocol import (
    CompletionChunk,
    FinishReason,
    GenerateInput,
    GenerationUpdate,
    TokenLogprob,
)
from tests.conftest import TINY
from tests.server.fake_engine import FakeEngine
from tests.server.work_counter import fake_server
from xinserve.v1 import common_pb2, inference_pb2, inference_pb2_grpc, sampling_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")

DELTAS = (1, 4, 2, 7, 1, 3)  # tokens per engine update: merged outputs of 1 to 7 steps


def _lp(token: int) -> list[TokenLogprob]:
    return [TokenLogprob(token, -0.5 - token / 100, 1, f"<{token}>")]


class MergedDeltaEngine(FakeEngine):
    """Streams ``DELTAS`` as updates of several tokens each (with one logprob candidate per
    token); a unary request gets the whole completion in one update."""

    async def generate(self, request: GenerateInput) -> AsyncIterator[GenerationUpdate]:
        self._alive()
        ids = list(range(200, 200 + sum(DELTAS)))
        if not request.stream:
            chunk = CompletionChunk(0, "".join(f"w{t} " for t in ids), ids, FinishReason.LENGTH)
            chunk.logprobs = [_lp(t) for t in ids]
            yield GenerationUpdate(request.request_id, [chunk], 5, 0, True)
            return
        start = 0
        for i, size in enumerate(DELTAS):
            part = ids[start : start + size]
            start += size
            last = i == len(DELTAS) - 1
            chunk = CompletionChunk(0, "".join(f"w{t} " for t in part), part, FinishReason.LENGTH if last else None)
            chunk.logprobs = [_lp(t) for t in part]
            yield GenerationUpdate(request.request_id, [chunk], 5, 0, last)


def _flat_logprobs(positions) -> list[tuple[int, float, str]]:
    return [(c.token_id, round(c.logprob, 6), c.decoded_token) for p in positions for c in p.candidates]


async def test_multi_token_deltas_concatenate_to_the_unary_answer(tmp_path):
    async with fake_server(tmp_path, MergedDeltaEngine("m")) as target:
        async with grpc.aio.insecure_channel(target) as channel:
            stub = inference_pb2_grpc.InferenceServiceStub(channel)
            req = inference_pb2.GenerateRequest(model="m", prompt="hi")
            stream = [m async for m in stub.GenerateStream(req, timeout=60)]
            unary = await stub.Generate(req, timeout=60)
    whole = unary.outputs[0]
    assert len(stream) == len(DELTAS), "one message per engine update, however many tokens it holds"
    assert [len(m.token_ids) for m in stream] == list(DELTAS)
    assert "".join(m.text for m in stream) == whole.text
    assert [t for m in stream for t in m.token_ids] == list(whole.token_ids)
    assert [p for m in stream for p in _flat_logprobs(m.logprobs)] == _flat_logprobs(whole.logprobs)
    reasons = [m.finish_reason for m in stream]
    assert reasons[-1] == whole.finish_reason == common_pb2.FINISH_REASON_LENGTH
    assert set(reasons[:-1]) == {common_pb2.FINISH_REASON_UNSPECIFIED}
    assert [m.HasField("usage") for m in stream] == [False] * (len(DELTAS) - 1) + [True]
    assert stream[-1].usage.completion_tokens == unary.usage.completion_tokens == sum(DELTAS)
    assert stream[-1].usage.prompt_tokens == unary.usage.prompt_tokens


async def test_real_engine_stream_with_merged_deltas_equals_the_unary_answer(api):
    tokens = 64
    params = sampling_pb2.SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True, logprobs=1)
    req = inference_pb2.GenerateRequest(model=TINY, prompt="The river stone and the lantern", sampling_params=params)
    unary = await api.inference.Generate(req, timeout=300)
    call = api.inference.GenerateStream(req, timeout=300)
    stream = [await call.read()]
    # Hold the event loop that runs the server (the engine core goes on in its process):
    # the outputs of the steps it makes meanwhile reach this server together.
    time.sleep(1.0)  # noqa: ASYNC251 - blocking the loop on purpose
    while (msg := await call.read()) is not grpc.aio.EOF:
        stream.append(msg)
    whole = unary.outputs[0]
    print(f"real engine: {tokens} tokens in {len(stream)} messages")
    assert len(stream) <= tokens
    assert "".join(m.text for m in stream) == whole.text
    assert [t for m in stream for t in m.token_ids] == list(whole.token_ids)
    assert len(whole.token_ids) == tokens
    assert [p[0] for m in stream for p in _flat_logprobs(m.logprobs)] == [p[0] for p in _flat_logprobs(whole.logprobs)]
    assert [m.finish_reason for m in stream if m.finish_reason] == [whole.finish_reason]
    assert [m.HasField("usage") for m in stream].count(True) == 1 and stream[-1].HasField("usage")
    assert stream[-1].usage.completion_tokens == unary.usage.completion_tokens == tokens
