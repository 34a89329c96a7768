"""Tool-calling requests refused with the field that is wrong, on both front ends: the
official ``openai`` SDK over HTTP and gRPC Chat on the same call core (fake engines)."""

from __future__ import annotations

import json

import grpc
import openai
import pytest
import pytest_asyncio

from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import both_over_fake_engines
from tests.server.stubs import field_violations, stubs
from xinserve.v1 import common_pb2, inference_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")

MAX_SCHEMA_BYTES = 2048
SMALL = {"type": "object", "properties": {"city": {"type": "string"}}}
# Fits max_structured_output_bytes alone, not twice in one forced schema.
HALF = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(48)}}
# Over max_structured_output_bytes on its own.
BIG = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(120)}}
# Nested deeper than max_structured_output_depth.
DEEP: dict = {"type": "object"}
for _ in range(6):
    DEEP = {"type": "object", "properties": {"x": DEEP}}


def tool(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def stack(tmp_path_factory):
    limits = {"max_structured_output_bytes": MAX_SCHEMA_BYTES, "max_structured_output_depth": 8}
    async with both_over_fake_engines(
        tmp_path_factory.mktemp("tool-refusals"), [FakeEngine("m")], {"limits": limits}
    ) as (port, grpc_port, _):
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        channel = stubs(grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}"))
        yield client, channel.inference
        await channel.close()


async def refused(client, **body) -> dict:
    """The OpenAI error object of a chat request that must be refused with 400."""
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="m", **body)
    return caught.value.body


def grpc_request(tools: list[dict], **choice) -> inference_pb2.ChatRequest:
    request = inference_pb2.ChatRequest(model="m", messages=[common_pb2.ChatMessage(role="user", content="hi")])
    for t in tools:
        f = t["function"]
        request.tools.add(name=f["name"], parameters_json=json.dumps(f["parameters"]))
    if choice:
        request.tool_choice.MergeFrom(inference_pb2.ToolChoice(**choice))
    return request


async def grpc_violations(inference, request) -> dict[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Chat(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return field_violations(caught.value)


# -- a forced tool's parameters past the structured-output bounds -------------------------


@pytest.mark.parametrize(
    ("parameters", "limit"), [(BIG, "max_structured_output_bytes"), (DEEP, "max_structured_output_depth")]
)
@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "big"}}])
async def test_a_forced_tools_parameters_over_the_bounds_name_that_tool(stack, parameters, limit, choice):
    client, inference = stack
    tools = [tool("small", SMALL), tool("big", parameters)]
    error = await refused(client, tools=tools, tool_choice=choice)
    assert error["param"] == "tools[1].function.parameters"
    assert limit in error["message"] and "response_format" not in error["message"]
    named = {"function_name": "big"} if isinstance(choice, dict) else {"mode": inference_pb2.TOOL_CHOICE_MODE_REQUIRED}
    violations = await grpc_violations(inference, grpc_request(tools, **named))
    assert list(violations) == ["tools[1].parameters_json"] and limit in violations["tools[1].parameters_json"]


async def test_tools_that_fit_alone_but_not_forced_together_name_tools(stack):
    client, inference = stack
    tools = [tool("a", HALF), tool("b", HALF)]
    error = await refused(client, tools=tools, tool_choice="required")
    assert error["param"] == "tools"
    assert "max_structured_output_bytes" in error["message"]
    violations = await grpc_violations(inference, grpc_request(tools, mode=inference_pb2.TOOL_CHOICE_MODE_REQUIRED))
    assert list(violations) == ["tools"]


async def test_a_large_tool_not_forced_is_not_a_structured_output(stack):
    client, _ = stack
    tools = [tool("small", SMALL), tool("big", BIG)]
    reply = await client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "small"}},
    )
    assert reply.choices[0].message.content == "x"  # the fake engine's one token: not the forced JSON


# -- a malformed tool_choice ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "said"),
    [
        (5, "got a number"),
        (["auto"], "got an array"),
        ("sometimes", "got the string 'sometimes'"),
        ({"type": "function"}, "function.name"),
        ({"type": "function", "function": {}}, "function.name"),
        ({"type": "function", "function": {"name": 3}}, "function.name"),
        ({"function": {"name": "small"}}, '"type": "function"'),
        ({"type": "tool", "function": {"name": "small"}}, '"type": "function"'),
        ({"type": "function", "function": {"name": "small"}, "extra": 1}, "'extra'"),
    ],
)
async def test_a_malformed_tool_choice_is_refused_naming_it(stack, choice, said):
    client, _ = stack
    error = await refused(client, tools=[tool("small", SMALL)], tool_choice=choice)
    assert error["param"] == "tool_choice"
    rule = 'tool_choice: must be "none", "auto", "required" or {"type": "function"'
    assert error["message"].startswith(f"invalid request: {rule}")
    assert said in error["message"]
    assert "or an object" not in error["message"]


@pytest.mark.parametrize(
    ("choice", "said"),
    [({"mode": inference_pb2.TOOL_CHOICE_MODE_UNSPECIFIED}, "got mode 0"), ({"mode": 9}, "got mode 9"),
     ({"function_name": ""}, "empty")],
)  # fmt: skip
async def test_grpc_a_malformed_tool_choice_is_refused_naming_it(stack, choice, said):
    _, inference = stack
    violations = await grpc_violations(inference, grpc_request([tool("small", SMALL)], **choice))
    assert list(violations) == ["tool_choice"] and said in violations["tool_choice"]


# -- tool calls and tool results in the history ---------------------------------------------

ASKED = {"role": "user", "content": "weather?"}
CALLED = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "small", "arguments": "{}"}}],
}


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([ASKED, CALLED, {"role": "tool", "content": "sunny"}], "messages[2].tool_call_id"),
        ([ASKED, CALLED, {"role": "tool", "content": "sunny", "tool_call_id": ""}], "messages[2].tool_call_id"),
        (
            [ASKED, {**CALLED, "tool_calls": [{**CALLED["tool_calls"][0], "id": ""}]}],
            "messages[1].tool_calls[0].id",
        ),
        (
            [ASKED, {**CALLED, "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}]}],
            "messages[1].tool_calls[0].function.name",
        ),
        (
            [ASKED, {**CALLED, "tool_calls": [{"type": "function", "function": {"name": "small", "arguments": "{}"}}]}],
            "messages[1].tool_calls[0].id",
        ),
    ],
)
async def test_a_tool_message_or_call_without_its_id_or_name_is_refused(stack, messages, param):
    client, _ = stack
    error = await refused(client, tools=[tool("small", SMALL)], tool_choice="none", messages=messages)
    assert error["param"] == param
    assert "is required" in error["message"]


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (common_pb2.ChatMessage(role="tool", content="sunny"), "messages[1].tool_call_id"),
        (
            common_pb2.ChatMessage(role="assistant", tool_calls=[common_pb2.ToolCall(name="small", arguments="{}")]),
            "messages[1].tool_calls[0].id",
        ),
        (
            common_pb2.ChatMessage(role="assistant", tool_calls=[common_pb2.ToolCall(id="c", arguments="{}")]),
            "messages[1].tool_calls[0].name",
        ),
    ],
)
async def test_grpc_a_tool_message_or_call_without_its_id_or_name_is_refused(stack, message, field):
    _, inference = stack
    request = grpc_request([tool("small", SMALL)], mode=inference_pb2.TOOL_CHOICE_MODE_NONE)
    request.messages.append(message)
    violations = await grpc_violations(inference, request)
    assert field in violations and "is required" in violations[field]


async def test_a_tool_message_answering_a_call_is_accepted(stack):
    client, _ = stack
    reply = await client.chat.completions.create(
        model="m",
        messages=[ASKED, CALLED, {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}],
        tools=[tool("small", SMALL)],
        tool_choice="none",
    )
    assert reply.choices[0].message.content == "x"


# -- a forced call cut by max_tokens ---------------------------------------------------------
# The fake engine's whole reply is "x" with finish reason length: a forced call's JSON cut short.


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "small"}}])
async def test_a_forced_call_cut_by_max_tokens_is_its_partial_text_with_length(stack, choice):
    client, inference = stack
    body = {"messages": [ASKED], "tools": [tool("small", SMALL)], "tool_choice": choice, "max_tokens": 1}
    reply = await client.chat.completions.create(model="m", **body)
    (out,) = reply.choices
    assert (out.finish_reason, out.message.content, out.message.tool_calls) == ("length", "x", None)
    stream = await client.chat.completions.create(model="m", stream=True, **body)
    chunks = [c for chunk in [c async for c in stream] for c in chunk.choices]
    assert "".join(c.delta.content or "" for c in chunks) == "x"
    assert [c.finish_reason for c in chunks if c.finish_reason] == ["length"]
    assert not any(c.delta.tool_calls for c in chunks)

    named = (
        {"function_name": "small"} if isinstance(choice, dict) else {"mode": inference_pb2.TOOL_CHOICE_MODE_REQUIRED}
    )
    request = grpc_request([tool("small", SMALL)], **named)
    request.sampling_params.max_tokens = 1
    (output,) = (await inference.Chat(request)).outputs
    assert (output.text, output.finish_reason, list(output.tool_calls)) == ("x", common_pb2.FINISH_REASON_LENGTH, [])
    (last,) = [m async for m in inference.ChatStream(request) if m.finish_reason]
    assert (last.finish_reason, list(last.tool_calls)) == (common_pb2.FINISH_REASON_LENGTH, [])
