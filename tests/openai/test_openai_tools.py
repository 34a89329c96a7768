"""Tool calling on ``POST /v1/chat/completions`` with the official ``openai`` SDK against the
live server (the session's tiny model): ``tool_choice`` ``"required"`` and a named function
forced by structured output (valid calls matching the tools' schemas, from any model),
streamed as OpenAI streams tool calls; ``"none"`` with tools; ``"auto"`` refused without a
tool-call parser, as vLLM refuses it; tool calls and tool results in the history; each call
audited with the digest of its output, like any output."""

from __future__ import annotations

import json
import time

import jsonschema
import openai
import pytest

from audit import QueryFilter
from audit.records import decode_record
from tests.conftest import TINY
from trust.sm3 import sm3
from xinserve.v1 import common_pb2, inference_pb2, sampling_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
    "required": ["city"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"utc": {"type": "boolean"}},
    "required": ["utc"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather in a city", "parameters": WEATHER},
    },
    {"type": "function", "function": {"name": "get_time", "description": "The time now", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def client(http_server, **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=http_server.base_url, api_key="unused", max_retries=0, timeout=120, **kw)


def _valid_call(call) -> dict:
    assert call.type == "function" and call.id.startswith("call_")
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, SCHEMAS[call.function.name])
    return arguments


async def test_required_tool_choice_answers_with_a_valid_tool_call(http_server):
    reply = await client(http_server).chat.completions.create(
        model=TINY,
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=60,
        temperature=0,
    )
    (choice,) = reply.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name in SCHEMAS
    _valid_call(call)


async def test_named_tool_choice_calls_that_function(http_server):
    reply = await client(http_server).chat.completions.create(
        model=TINY,
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=40,
        temperature=0,
    )
    (choice,) = reply.choices
    # vLLM and OpenAI end a named tool choice with "stop".
    assert choice.finish_reason == "stop"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_time"
    assert isinstance(_valid_call(call)["utc"], bool)


async def test_streamed_tool_calls_arrive_as_openai_deltas(http_server):
    stream = await client(http_server).chat.completions.create(
        model=TINY,
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=40,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    deltas, finish, usage = [], None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            assert c.delta.content in (None, "")
            deltas.extend(c.delta.tool_calls or [])
            finish = c.finish_reason or finish
    head, *fragments = deltas
    assert (head.index, head.type, head.function.name, head.function.arguments) == (0, "function", "get_weather", "")
    assert head.id.startswith("call_")
    assert fragments and all(f.index == 0 and f.id is None and f.function.name is None for f in fragments)
    arguments = json.loads("".join(f.function.arguments for f in fragments))
    jsonschema.validate(arguments, WEATHER)
    assert finish == "stop" and usage is not None and usage.completion_tokens > 0


async def test_tool_choice_none_with_tools_answers_text(http_server):
    reply = await client(http_server).chat.completions.create(
        model=TINY, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=6, temperature=0
    )
    (choice,) = reply.choices
    assert choice.message.tool_calls is None and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")


@pytest.mark.parametrize("choice", ["auto", None])
async def test_auto_tool_choice_without_a_parser_is_refused_naming_tool_choice(http_server, choice):
    extra = {"tool_choice": choice} if choice else {}
    with pytest.raises(openai.BadRequestError) as caught:
        await client(http_server).chat.completions.create(model=TINY, messages=ASK, tools=TOOLS, max_tokens=4, **extra)
    assert caught.value.body["param"] == "tool_choice"
    assert "tool-call parser" in caught.value.body["message"]


async def test_history_with_tool_calls_and_tool_results_is_accepted(http_server):
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ]
    reply = await client(http_server).chat.completions.create(
        model=TINY, messages=history, tools=TOOLS, tool_choice="none", max_tokens=6, temperature=0
    )
    assert isinstance(reply.choices[0].message.content, str)


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"tools": []}, "tools"),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        (
            {"tools": [{"type": "function", "function": {"name": "bad name"}}], "tool_choice": "required"},
            "tools[0].function.name",
        ),
        ({"tools": None, "tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        (
            {
                "messages": [
                    *ASK,
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "[1]"}}
                        ],
                    },
                ],
                "tool_choice": "none",
            },
            "messages[1].tool_calls[0].function.arguments",
        ),
        ({"messages": [{"role": "user", "content": None}], "tool_choice": "none"}, "messages[0].content"),
    ],
)
async def test_bad_tool_fields_are_400s_naming_the_field(http_server, change, param):
    body = {"model": TINY, "messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 4, **change}
    body = {k: v for k, v in body.items() if v is not None}
    with pytest.raises(openai.BadRequestError) as caught:
        await client(http_server).chat.completions.create(**body)
    assert caught.value.status_code == 400
    assert caught.value.body["param"] == param, caught.value.body


async def test_tool_calls_are_audited_with_the_digest_of_the_output(http_server, api, live_server):
    since = int(time.time() * 1000) - 1
    rid = "openai-tools-audit-1"
    reply = await client(http_server, default_headers={"x-request-id": rid}).chat.completions.create(
        model=TINY,
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=40,
        temperature=0,
    )
    (call,) = reply.choices[0].message.tool_calls
    # The same request over gRPC gives the forced JSON as its text (greedy: the same output).
    grpc_reply = await api.inference.Chat(
        inference_pb2.ChatRequest(
            model=TINY,
            messages=[common_pb2.ChatMessage(**m) for m in ASK],
            sampling_params=sampling_pb2.SamplingParams(max_tokens=40, temperature=0.0),
            tools=[
                common_pb2.Tool(
                    name=t["function"]["name"],
                    description=t["function"]["description"],
                    parameters_json=json.dumps(t["function"]["parameters"]),
                )
                for t in TOOLS
            ],
            tool_choice=inference_pb2.ToolChoice(function_name="get_weather"),
        )
    )
    text = grpc_reply.outputs[0].text
    assert json.loads(text) == json.loads(call.function.arguments)
    rows = await live_server.runtime.audit.log.query(QueryFilter(since_ms=since))
    records = [decode_record(row.body)[2] for row in rows]
    (record,) = [r for r in records if r.request_id == rid and r.event != "rpc_begin"]
    assert record.outcome == "OK" and record.method == "openai/chat.completions"
    assert record.output_sm3 == sm3(text.encode("utf-8")).hex()
    assert record.output_tokens == reply.usage.completion_tokens
    # The record holds digests, never the arguments themselves.
    assert call.function.arguments not in repr(record)
