"""The official ``openai`` SDK (sync and async, streaming and not) against the real server's
OpenAI-compatible front end: chat, completions, embeddings, models, n, stop, seed,
structured output, logprobs, and OpenAI-shaped errors."""

from __future__ import annotations

import asyncio
import json
import math

import openai
import pytest

from tests.conftest import MINILM, TINY

pytestmark = pytest.mark.asyncio(loop_scope="session")


def sync_client(http_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=http_server.base_url, api_key="unused", max_retries=0, timeout=120)


def async_client(http_server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=http_server.base_url, api_key="unused", max_retries=0, timeout=120)


async def test_models_lists_the_ready_models(http_server):
    # The sync client blocks; the server shares this event loop, so it runs in a thread.
    models = await asyncio.to_thread(lambda: sync_client(http_server).models.list())
    assert {m.id for m in models.data} >= {TINY, MINILM}
    assert all(m.object == "model" for m in models.data)
    one = await async_client(http_server).models.retrieve(TINY)
    assert one.id == TINY


async def test_chat_sync_not_streamed(http_server):
    def call():
        return sync_client(http_server).chat.completions.create(
            model=TINY, messages=[{"role": "user", "content": "hello"}], max_tokens=8, temperature=0
        )

    reply = await asyncio.to_thread(call)
    assert reply.object == "chat.completion"
    (choice,) = reply.choices
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert reply.usage.completion_tokens >= 1 and reply.usage.prompt_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


async def test_chat_async_streamed_with_usage(http_server):
    client = async_client(http_server)
    stream = await client.chat.completions.create(
        model=TINY,
        messages=[{"role": "user", "content": "stream please"}],
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, roles, reasons, usage = [], [], [], None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            if c.delta.content:
                text.append(c.delta.content)
            if c.finish_reason:
                reasons.append(c.finish_reason)
    assert roles == ["assistant"]
    assert len(reasons) == 1
    assert usage is not None and usage.completion_tokens >= 1
    whole = await client.chat.completions.create(
        model=TINY, messages=[{"role": "user", "content": "stream please"}], max_tokens=12, temperature=0
    )
    assert "".join(text) == whole.choices[0].message.content


async def test_completions_sync_streamed_and_async_not(http_server):
    def streamed():
        parts = []
        for chunk in sync_client(http_server).completions.create(
            model=TINY, prompt="once upon", max_tokens=10, temperature=0, stream=True
        ):
            parts.extend(c.text for c in chunk.choices)
        return "".join(parts)

    text = await asyncio.to_thread(streamed)
    reply = await async_client(http_server).completions.create(
        model=TINY, prompt="once upon", max_tokens=10, temperature=0
    )
    assert reply.object == "text_completion"
    assert reply.choices[0].text == text
    assert reply.usage.completion_tokens == 10 or reply.choices[0].finish_reason == "stop"


async def test_n_greater_than_one(http_server):
    reply = await async_client(http_server).completions.create(
        model=TINY, prompt="many", max_tokens=6, temperature=1.0, n=3, seed=11
    )
    assert sorted(c.index for c in reply.choices) == [0, 1, 2]


async def test_stop_cuts_the_text(http_server):
    client = async_client(http_server)
    free = await client.completions.create(model=TINY, prompt="stop here", max_tokens=24, temperature=0)
    text = free.choices[0].text
    stop = next(
        (
            text[i : i + 2]
            for i in range(1, len(text) - 2)
            if text[i : i + 2].strip() and "\ufffd" not in text[i : i + 2]
        ),
        None,
    )
    if stop is None:
        pytest.skip(f"the greedy output has no usable stop string: {text!r}")
    cut = await client.completions.create(model=TINY, prompt="stop here", max_tokens=24, temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[: text.index(stop)]


async def test_seed_makes_sampling_reproducible(http_server):
    client = async_client(http_server)

    async def sample(seed: int) -> str:
        reply = await client.completions.create(model=TINY, prompt="dice", max_tokens=16, temperature=1.0, seed=seed)
        return reply.choices[0].text

    first, again = await sample(1234), await sample(1234)
    assert first == again


async def test_structured_output_json_schema_is_valid_json(http_server):
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    reply = await async_client(http_server).chat.completions.create(
        model=TINY,
        messages=[{"role": "user", "content": "answer in JSON"}],
        max_tokens=40,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}},
    )
    value = json.loads(reply.choices[0].message.content)
    assert isinstance(value, dict) and isinstance(value["ok"], bool) and set(value) == {"ok"}


async def test_chat_logprobs(http_server):
    reply = await async_client(http_server).chat.completions.create(
        model=TINY,
        messages=[{"role": "user", "content": "probabilities"}],
        max_tokens=4,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens
    for position in content:
        assert len(position.top_logprobs) == 3
        assert position.logprob <= 0.0
        # Greedy: the chosen token is the most likely one.
        assert position.logprob == pytest.approx(max(t.logprob for t in position.top_logprobs), abs=1e-4)


async def test_embeddings_base64_default_and_float(http_server):
    texts = ["A cat sits on the mat.", "A kitten rests on a rug."]
    client = async_client(http_server)
    default = await client.embeddings.create(model=MINILM, input=texts)  # the SDK asks for base64
    floats = await client.embeddings.create(model=MINILM, input=texts, encoding_format="float")
    assert [len(d.embedding) for d in default.data] == [384, 384]
    for a, b in zip(default.data, floats.data, strict=True):
        assert a.embedding == pytest.approx(b.embedding, abs=1e-6)
    norm = math.sqrt(sum(x * x for x in floats.data[0].embedding))
    assert norm == pytest.approx(1.0, abs=1e-3)
    assert default.usage.prompt_tokens > 0


async def test_client_mistakes_get_openai_errors(http_server):
    client = async_client(http_server)
    with pytest.raises(openai.BadRequestError) as bad:
        await client.chat.completions.create(
            model=TINY, messages=[{"role": "user", "content": "x"}], temperature=-1, max_tokens=2
        )
    assert bad.value.status_code == 400
    assert bad.value.body["param"] == "temperature" and bad.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError) as missing:
        await client.completions.create(model="no-such-model", prompt="x", max_tokens=2)
    assert missing.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as kind:
        await client.chat.completions.create(model=MINILM, messages=[{"role": "user", "content": "x"}], max_tokens=2)
    assert kind.value.body["code"] == "wrong_model_kind"
    with pytest.raises(openai.BadRequestError) as tools:
        await client.chat.completions.create(
            model=TINY,
            messages=[{"role": "user", "content": "x"}],
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        )
    # Tools without tool_choice mean "auto", which needs a tool-call parser (as on vLLM).
    assert tools.value.body["param"] == "tool_choice"
    with pytest.raises(openai.BadRequestError) as many:
        await client.completions.create(model=TINY, prompt="x", max_tokens=2, n=10_000)
    assert many.value.body["param"] == "n"
