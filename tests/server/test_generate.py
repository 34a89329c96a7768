"""Generation through the real engine equals Hugging Face transformers' greedy decode."""

from __future__ import annotations

import grpc
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.conftest import TINY
from xinserve.v1 import common_pb2, inference_pb2, sampling_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")

PROMPT = "The quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def reference(live_server):
    """Greedy continuation by transformers from the same weights (the reference)."""
    path = live_server.runtime.models[TINY].path
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    ids = tok(PROMPT)["input_ids"]
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=24, min_new_tokens=24, do_sample=False, pad_token_id=0)
    return ids, out[0][len(ids) :].tolist(), tok


def greedy(max_tokens: int = 24) -> sampling_pb2.SamplingParams:
    return sampling_pb2.SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)


async def test_generate_greedy_equals_transformers(api, reference):
    prompt_ids, expected, tok = reference
    reply = await api.inference.Generate(
        inference_pb2.GenerateRequest(model=TINY, prompt=PROMPT, sampling_params=greedy())
    )
    assert len(reply.outputs) == 1
    out = reply.outputs[0]
    assert list(out.token_ids) == expected
    assert out.text == tok.decode(expected, skip_special_tokens=True)
    assert out.finish_reason == common_pb2.FINISH_REASON_LENGTH
    assert reply.usage.prompt_tokens == len(prompt_ids)
    assert reply.usage.completion_tokens == 24


async def test_generate_stream_greedy_equals_transformers(api, reference):
    _, expected, tok = reference
    ids: list[int] = []
    text = ""
    finals = 0
    messages = 0
    async for msg in api.inference.GenerateStream(
        inference_pb2.GenerateRequest(model=TINY, prompt=PROMPT, sampling_params=greedy(), request_id="stream-greedy")
    ):
        messages += 1
        assert msg.request_id == "stream-greedy"
        ids.extend(msg.token_ids)
        text += msg.text
        if msg.finish_reason != common_pb2.FINISH_REASON_UNSPECIFIED:
            finals += 1
            assert msg.HasField("usage")
        else:
            assert not msg.HasField("usage")
    assert ids == expected
    assert text == tok.decode(expected, skip_special_tokens=True)
    assert finals == 1
    assert messages > 1, "a stream must deliver deltas, not one message"


async def test_prompt_token_ids_equal_text_prompt(api, reference):
    prompt_ids, expected, _ = reference
    reply = await api.inference.Generate(
        inference_pb2.GenerateRequest(model=TINY, prompt_token_ids=prompt_ids, sampling_params=greedy())
    )
    assert list(reply.outputs[0].token_ids) == expected


async def test_n_streams_finish_each_index_once_and_usage_only_last(api):
    request = inference_pb2.GenerateRequest(
        model=TINY,
        prompt=PROMPT,
        sampling_params=sampling_pb2.SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=12, ignore_eos=True),
    )
    finished: dict[int, int] = {}
    tokens: dict[int, int] = {}
    msgs = [m async for m in api.inference.GenerateStream(request)]
    for i, m in enumerate(msgs):
        tokens[m.index] = tokens.get(m.index, 0) + len(m.token_ids)
        if m.finish_reason != common_pb2.FINISH_REASON_UNSPECIFIED:
            finished[m.index] = finished.get(m.index, 0) + 1
        assert m.HasField("usage") == (i == len(msgs) - 1)
    assert finished == {0: 1, 1: 1, 2: 1}
    assert tokens == {0: 12, 1: 12, 2: 12}
    assert msgs[-1].usage.completion_tokens == 36


async def test_same_seed_same_output_and_different_seed_differs(api):
    def req(seed: int) -> inference_pb2.GenerateRequest:
        return inference_pb2.GenerateRequest(
            model=TINY,
            prompt=PROMPT,
            sampling_params=sampling_pb2.SamplingParams(temperature=1.0, seed=seed, max_tokens=16, ignore_eos=True),
        )

    a = await api.inference.Generate(req(1234))
    b = await api.inference.Generate(req(1234))
    c = await api.inference.Generate(req(4321))
    assert list(a.outputs[0].token_ids) == list(b.outputs[0].token_ids)
    assert list(a.outputs[0].token_ids) != list(c.outputs[0].token_ids)


async def test_stop_string_spanning_token_boundaries(api, reference):
    _, expected, tok = reference
    full = tok.decode(expected, skip_special_tokens=True)
    # A stop string made of the end of one token and the start of the next.
    first = tok.decode(expected[:3], skip_special_tokens=True)
    second = tok.decode(expected[:4], skip_special_tokens=True)
    assert len(second) > len(first) + 1 or len(first) > 1
    cut = len(first)
    stop = full[cut - 1 : cut + 2]
    assert len(stop) == 3
    start = full.find(stop)
    reply = await api.inference.Generate(
        inference_pb2.GenerateRequest(
            model=TINY,
            prompt=PROMPT,
            sampling_params=sampling_pb2.SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, stop=[stop]),
        )
    )
    out = reply.outputs[0]
    assert out.finish_reason == common_pb2.FINISH_REASON_STOP_SEQUENCE
    assert out.stop_string == stop
    assert out.text == full[:start]

    streamed = ""
    async for m in api.inference.GenerateStream(
        inference_pb2.GenerateRequest(
            model=TINY,
            prompt=PROMPT,
            sampling_params=sampling_pb2.SamplingParams(
                temperature=0.0, max_tokens=24, ignore_eos=True, stop=[stop], include_stop_str_in_output=True
            ),
        )
    ):
        streamed += m.text
    assert streamed == full[: start + len(stop)]


async def test_logprobs_returned_for_each_token(api):
    reply = await api.inference.Generate(
        inference_pb2.GenerateRequest(
            model=TINY,
            prompt=PROMPT,
            sampling_params=sampling_pb2.SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True, logprobs=3),
        )
    )
    out = reply.outputs[0]
    assert len(out.logprobs) == 5
    for token, position in zip(out.token_ids, out.logprobs, strict=True):
        assert position.candidates[0].token_id == token
        assert position.candidates[0].rank == 1  # greedy: the chosen token is the most likely
        assert all(c.logprob <= 0 for c in position.candidates)
    assert out.HasField("cumulative_logprob")


async def test_chat_applies_template_and_streams(api, live_server):
    messages = [
        common_pb2.ChatMessage(role="system", content="be brief"),
        common_pb2.ChatMessage(role="user", content="hello"),
    ]
    params = sampling_pb2.SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    unary = await api.inference.Chat(inference_pb2.ChatRequest(model=TINY, messages=messages, sampling_params=params))
    streamed: list[int] = []
    async for m in api.inference.ChatStream(
        inference_pb2.ChatRequest(model=TINY, messages=messages, sampling_params=params)
    ):
        streamed.extend(m.token_ids)
    assert list(unary.outputs[0].token_ids) == streamed
    tok = AutoTokenizer.from_pretrained(live_server.runtime.models[TINY].path)
    templated = tok.apply_chat_template(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert unary.usage.prompt_tokens == len(tok(templated, add_special_tokens=False)["input_ids"])


async def test_tokenize_detokenize_round_trip(api):
    from xinserve.v1 import inference_pb2 as ip

    tok = await api.inference.Tokenize(ip.TokenizeRequest(model=TINY, text="hello world"))
    assert tok.max_model_len == 2048
    assert len(tok.token_ids) >= 2
    text = await api.inference.Detokenize(ip.DetokenizeRequest(model=TINY, token_ids=tok.token_ids))
    assert text.text == "hello world"


async def test_request_id_from_metadata_is_echoed(api):
    reply = await api.inference.Generate(
        inference_pb2.GenerateRequest(model=TINY, prompt="hi", sampling_params=greedy(2)),
        metadata=(("x-request-id", "from-metadata-1"),),
    )
    assert reply.request_id == "from-metadata-1"
    generated = await api.inference.Generate(
        inference_pb2.GenerateRequest(model=TINY, prompt="hi", sampling_params=greedy(2))
    )
    assert len(generated.request_id) == 32


async def test_embedding_model_refuses_generate(api):
    from tests.conftest import MINILM

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.inference.Generate(inference_pb2.GenerateRequest(model=MINILM, prompt="x"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
