"""smollm2-135m-instruct through the real server: greedy output equals transformers' on the
converted weights, token for token; it answers; GetModel shows its real context and dtype."""

from __future__ import annotations

import grpc
import pytest
import pytest_asyncio
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.server.stubs import field_violations, stubs
from tests.smollm2.conftest import SLOW, SMOLLM2
from trust.manifest import build_manifest, manifest_digest
from trust.model_signing import SIGNATURE_FILENAME
from xinserve.v1 import common_pb2, inference_pb2, model_pb2, sampling_pb2

pytestmark = [pytest.mark.asyncio(loop_scope="session"), SLOW]

PROMPTS = ["The capital of France is", "def fibonacci(n):"]
CHATS = [
    [("user", "What is the capital of France?")],
    [("system", "Answer in one sentence."), ("user", "Why is the sky blue?")],
]
TOKENS = 24


@pytest.fixture(scope="module")
def hf(smollm2_dir):
    """transformers' tokenizer and model from the converted directory (the reference)."""
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    model.eval()
    return tok, model


def hf_greedy(hf, ids: list[int], ignore_eos: bool) -> list[int]:
    tok, model = hf
    extra = {"min_new_tokens": TOKENS} if ignore_eos else {}
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=TOKENS, do_sample=False, pad_token_id=tok.pad_token_id, **extra
        )
    return out[0][len(ids) :].tolist()


@pytest_asyncio.fixture(loop_scope="session")
async def api(smollm2_server):
    s = stubs(grpc.aio.insecure_channel(smollm2_server.target))
    try:
        yield s
    finally:
        await s.close()


def greedy(max_tokens: int = TOKENS, ignore_eos: bool = True) -> sampling_pb2.SamplingParams:
    return sampling_pb2.SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos)


def chat_messages(chat) -> list[common_pb2.ChatMessage]:
    return [common_pb2.ChatMessage(role=r, content=c) for r, c in chat]


@pytest.mark.parametrize("prompt", PROMPTS)
async def test_generate_and_stream_equal_transformers_greedy(api, hf, prompt):
    tok, _ = hf
    prompt_ids = tok(prompt)["input_ids"]
    expected = hf_greedy(hf, prompt_ids, ignore_eos=True)
    reply = await api.inference.Generate(
        inference_pb2.GenerateRequest(model=SMOLLM2, prompt=prompt, sampling_params=greedy())
    )
    assert list(reply.outputs[0].token_ids) == expected
    assert reply.outputs[0].text == tok.decode(expected, skip_special_tokens=True)
    assert reply.usage.prompt_tokens == len(prompt_ids)
    streamed: list[int] = []
    text = ""
    async for msg in api.inference.GenerateStream(
        inference_pb2.GenerateRequest(model=SMOLLM2, prompt=prompt, sampling_params=greedy())
    ):
        streamed.extend(msg.token_ids)
        text += msg.text
    assert streamed == expected
    assert text == reply.outputs[0].text


@pytest.mark.parametrize("chat", CHATS, ids=["capital", "sky"])
async def test_chat_equals_transformers_greedy_with_the_models_template(api, hf, chat):
    tok, _ = hf
    rendered = tok.apply_chat_template(
        [{"role": r, "content": c} for r, c in chat], tokenize=False, add_generation_prompt=True
    )
    assert "<|im_start|>assistant\n" in rendered  # the model's own ChatML template
    prompt_ids = tok(rendered, add_special_tokens=False)["input_ids"]
    expected = hf_greedy(hf, prompt_ids, ignore_eos=False)
    reply = await api.inference.Chat(
        inference_pb2.ChatRequest(model=SMOLLM2, messages=chat_messages(chat), sampling_params=greedy(ignore_eos=False))
    )
    assert list(reply.outputs[0].token_ids) == expected
    assert reply.usage.prompt_tokens == len(prompt_ids)


async def test_the_capital_of_france_is_paris(api):
    reply = await api.inference.Chat(
        inference_pb2.ChatRequest(
            model=SMOLLM2,
            messages=chat_messages([("user", "What is the capital of France?")]),
            sampling_params=sampling_pb2.SamplingParams(temperature=0.0, max_tokens=32),
        )
    )
    assert "Paris" in reply.outputs[0].text, reply.outputs[0].text
    assert reply.outputs[0].finish_reason == common_pb2.FINISH_REASON_STOP


async def test_max_tokens_past_the_8192_token_context_is_invalid_argument(api):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.inference.Generate(
            inference_pb2.GenerateRequest(
                model=SMOLLM2, prompt="Tell me a story.", sampling_params=sampling_pb2.SamplingParams(max_tokens=8190)
            )
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    violations = field_violations(err.value)
    assert "sampling_params.max_tokens" in violations, violations
    assert "8192" in violations["sampling_params.max_tokens"]


async def test_get_model_shows_context_dtype_and_the_demo_signature(api, smollm2_dir):
    model = (await api.models.GetModel(model_pb2.GetModelRequest(name=SMOLLM2))).model
    assert model.kind == model_pb2.MODEL_KIND_GENERATE
    assert model.max_context_length == 8192
    assert model.dtype == "float32"
    assert model.state == model_pb2.MODEL_STATE_READY
    assert model.verification_status == model_pb2.VERIFICATION_STATUS_VERIFIED
    assert model.manifest_digest == "sm3:" + manifest_digest(build_manifest(smollm2_dir, ignore=[SIGNATURE_FILENAME]))
