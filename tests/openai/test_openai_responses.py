"""OpenAI's Responses API (``POST /v1/responses``) through the official ``openai`` SDK's
``client.responses.create``, unary and streamed: the same text as the chat call it stands
for, ``instructions`` as a system message, the stream's event sequence, one audit record
like chat's, and the fields it cannot honour refused with 400 naming each."""

from __future__ import annotations

import time

import openai
import pytest

from audit import QueryFilter
from audit.records import decode_record
from tests.conftest import TINY

pytestmark = pytest.mark.asyncio(loop_scope="session")


def client(http_server, **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=http_server.base_url, api_key="unused", max_retries=0, timeout=120, **kw)


async def test_a_response_is_the_chat_reply_it_stands_for(http_server):
    api = client(http_server)
    chat = await api.chat.completions.create(
        model=TINY,
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}],
        max_tokens=8,
        temperature=0,
    )
    reply = await api.responses.create(
        model=TINY, instructions="be brief", input="hello there", max_output_tokens=8, temperature=0
    )
    assert reply.object == "response" and reply.status in ("completed", "incomplete")
    assert reply.output_text == chat.choices[0].message.content
    (item,) = reply.output
    assert (item.type, item.role, item.content[0].type) == ("message", "assistant", "output_text")
    assert reply.usage.input_tokens == chat.usage.prompt_tokens
    assert reply.usage.output_tokens == chat.usage.completion_tokens
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens
    if chat.choices[0].finish_reason == "length":
        assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"

    listed = await api.responses.create(
        model=TINY,
        input=[
            {"role": "developer", "content": "be brief"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello there"}]},
        ],
        max_output_tokens=8,
        temperature=0,
    )
    assert listed.output_text == reply.output_text


async def test_a_streamed_response_sends_the_responses_events(http_server):
    api = client(http_server)
    whole = await api.responses.create(model=TINY, input="stream a response", max_output_tokens=10, temperature=0)
    stream = await api.responses.create(
        model=TINY, input="stream a response", max_output_tokens=10, temperature=0, stream=True
    )
    kinds, deltas, numbers, final = [], [], [], None
    async for event in stream:
        kinds.append(event.type)
        numbers.append(event.sequence_number)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        if event.type in ("response.completed", "response.incomplete"):
            final = event.response
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert kinds[-1] == f"response.{whole.status}"
    assert numbers == list(range(len(kinds)))
    assert "".join(deltas) == whole.output_text and deltas
    assert final is not None and final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens


async def test_a_response_is_audited_like_its_chat_call(http_server, live_server):
    since = int(time.time() * 1000) - 1
    messages = [{"role": "user", "content": "audit the response"}]
    await client(http_server, default_headers={"x-request-id": "resp-audit-chat"}).chat.completions.create(
        model=TINY, messages=messages, max_tokens=4, temperature=0
    )
    await client(http_server, default_headers={"x-request-id": "resp-audit-1"}).responses.create(
        model=TINY, input="audit the response", max_output_tokens=4, temperature=0
    )
    rows = await live_server.runtime.audit.log.query(QueryFilter(since_ms=since))
    records = [decode_record(row.body)[2] for row in rows]
    ends = {r.request_id: r for r in records if r.event != "rpc_begin"}
    begins = [r.request_id for r in records if r.event == "rpc_begin"]
    r, c = ends["resp-audit-1"], ends["resp-audit-chat"]
    assert (r.method, r.outcome, r.model) == ("openai/responses", "OK", TINY)
    assert begins.count("resp-audit-1") == 1
    assert (r.prompt_sm3, r.output_sm3, r.prompt_tokens, r.output_tokens) == (
        c.prompt_sm3,
        c.output_sm3,
        c.prompt_tokens,
        c.output_tokens,
    )


@pytest.mark.parametrize(
    ("field", "extra"),
    [
        ("tools", {"tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]}),
        ("previous_response_id", {"previous_response_id": "resp_earlier"}),
        ("store", {"store": True}),
        ("background", {"background": True}),
        ("reasoning", {"reasoning": {"effort": "low"}}),
        ("text.format", {"text": {"format": {"type": "json_object"}}}),
        ("input[0].type", {"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}),
        ("input[0].role", {"input": [{"role": "tool", "content": "x"}]}),
        ("max_output_tokens", {"max_output_tokens": -1}),
    ],
)
async def test_what_a_response_cannot_honour_is_refused_naming_the_field(http_server, field, extra):
    body = {"model": TINY, "input": "x", **extra}
    with pytest.raises(openai.BadRequestError) as refused:
        await client(http_server).responses.create(**body)
    assert refused.value.body["param"] == field, refused.value.body
