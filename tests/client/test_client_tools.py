"""Tool calling through the Python client: the request it builds (unit), and a named tool
choice over gRPC ``Chat`` against the live server, whose reply text is the forced arguments."""

from __future__ import annotations

import json

import jsonschema
import pytest

from xinserve.v1 import common_pb2, inference_pb2
from xinserve_client import AsyncXinserveClient
from xinserve_client._base import _ClientBase

TINY = "xinserve-tiny-llama"
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}}]


def _request(**kw) -> inference_pb2.ChatRequest:
    return _ClientBase._chat_request(TINY, [("user", "hi")], None, None, None, {}, None, **kw)


def test_openai_tools_and_choices_become_the_contract_fields():
    req = _request(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    (tool,) = req.tools
    assert (tool.name, tool.description, json.loads(tool.parameters_json)) == ("get_weather", "Weather", WEATHER)
    assert req.tool_choice.function_name == "get_weather"
    assert _request(tools=TOOLS, tool_choice="required", parallel_tool_calls=False).parallel_tool_calls is False
    assert _request(tools=TOOLS, tool_choice="none").tool_choice.mode == inference_pb2.TOOL_CHOICE_MODE_NONE
    assert not _request().HasField("tool_choice") and not _request().tools


@pytest.mark.parametrize(
    ("kw", "error"),
    [
        ({"tool_choice": "sometimes"}, ValueError),
        ({"tool_choice": {"type": "function"}}, ValueError),
        ({"tools": [{"type": "retrieval"}]}, TypeError),
    ],
)
def test_bad_tool_arguments_are_refused_before_sending(kw, error):
    with pytest.raises(error):
        _request(**kw)


@pytest.mark.asyncio(loop_scope="session")
async def test_named_tool_choice_over_grpc_answers_the_arguments(live_server):
    history = [
        {"role": "user", "content": "weather in Rome?"},
        {"role": "assistant", "tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": '{"city":"Rome"}'}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
        {"role": "user", "content": "and Paris?"},
    ]
    named = {"type": "function", "function": {"name": "get_weather"}}
    messages = [common_pb2.ChatMessage(**m) for m in history]
    async with AsyncXinserveClient(live_server.target) as client:
        reply = await client.chat(TINY, messages, tools=TOOLS, tool_choice=named, max_tokens=40, temperature=0.0)
        streamed = [
            m
            async for m in client.chat_stream(
                TINY, messages, tools=TOOLS, tool_choice=named, max_tokens=40, temperature=0.0
            )
        ]
    (out,) = reply.outputs
    arguments = json.loads(out.text)
    jsonschema.validate(arguments, WEATHER)
    (call,) = out.tool_calls
    assert call.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.arguments) == arguments
    # Streamed: the deltas carry the same text; the index's last message carries the call.
    assert "".join(m.text for m in streamed) == out.text
    (last,) = [m for m in streamed if m.finish_reason]
    (streamed_call,) = last.tool_calls
    assert (streamed_call.name, json.loads(streamed_call.arguments)) == ("get_weather", arguments)
    assert all(not m.tool_calls for m in streamed if m is not last)
