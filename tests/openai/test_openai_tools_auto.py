"""``tool_choice: "auto"`` with a model's tool-call parser (``models[].tool_call_parser``):
vLLM's own ``hermes`` parser reads the tool calls out of text in the format it expects
(``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``), which a fake engine produces
where the built-in models cannot; unary and streamed with the official ``openai`` SDK, and
over gRPC Chat and ChatStream on the same call core."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator

import grpc
import openai
import pydantic
import pytest
import pytest_asyncio

from engine_backends.protocol import CompletionChunk, FinishReason, GenerateInput, GenerationUpdate
from engine_backends.tool_calls import AutoToolCalls
from service.settings.config import ModelSettings
from tests.server.fake_engine import FakeEngine
from tests.server.fake_http import both_over_fake_engines
from tests.server.stubs import field_violations, stubs
from xinserve.v1 import common_pb2, inference_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
SAID = "Let me check. "
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


class HermesEngine(FakeEngine):
    """Answers like a Hermes-format tool-calling model: text, then one ``<tool_call>`` block
    (plain text when the last message says "no tools"); streamed in 5-character deltas."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._info = dataclasses.replace(self._info, tool_call_parser="hermes")
        self.seen_tools: object = None

    def auto_tool_calls(self, tools):
        return AutoToolCalls("hermes", object(), tools)

    async def generate(self, request: GenerateInput) -> AsyncIterator[GenerationUpdate]:
        self._alive()
        self.seen_tools = request.tools
        last = (request.messages or [{}])[-1].get("content", "")
        text = "Sunny everywhere." if "no tools" in last else SAID + CALL
        pieces = [text[i : i + 5] for i in range(0, len(text), 5)] if request.stream else [text]
        for k, piece in enumerate(pieces):
            done = k == len(pieces) - 1
            chunk = CompletionChunk(0, piece, [7], FinishReason.STOP if done else None)
            yield GenerationUpdate(request.request_id, [chunk], 3, 0, done)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def stack(tmp_path_factory):
    """(openai client, the Hermes engine, gRPC port) over one call core."""
    engine = HermesEngine("hermes-model")
    async with both_over_fake_engines(tmp_path_factory.mktemp("auto"), [engine, FakeEngine("plain")]) as (
        port,
        grpc_port,
        _,
    ):
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        yield client, engine, grpc_port


@pytest.fixture
def served(stack):
    return stack[:2]


@pytest_asyncio.fixture(loop_scope="session")
async def inference(stack):
    s = stubs(grpc.aio.insecure_channel(f"127.0.0.1:{stack[2]}"))
    yield s.inference
    await s.close()


@pytest.mark.parametrize("choice", ["auto", None])
async def test_auto_reads_the_tool_calls_with_the_models_parser(served, choice):
    client, engine = served
    extra = {"tool_choice": choice} if choice else {}
    reply = await client.chat.completions.create(
        model="hermes-model", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS, **extra
    )
    (out,) = reply.choices
    assert out.finish_reason == "tool_calls"
    assert out.message.content == SAID
    (call,) = out.message.tool_calls
    assert call.type == "function" and call.id
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    # The tools reached the engine, for the chat template.
    assert engine.seen_tools == TOOLS


async def test_auto_without_a_tool_call_answers_text(served):
    client, _ = served
    reply = await client.chat.completions.create(
        model="hermes-model", messages=[{"role": "user", "content": "no tools"}], tools=TOOLS, tool_choice="auto"
    )
    (out,) = reply.choices
    assert (out.finish_reason, out.message.content, out.message.tool_calls) == ("stop", "Sunny everywhere.", None)


async def test_auto_streams_content_then_tool_call_deltas(served):
    client, _ = served
    stream = await client.chat.completions.create(
        model="hermes-model", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS, stream=True
    )
    content, calls, finish = "", [], None
    async for chunk in stream:
        for c in chunk.choices:
            content += c.delta.content or ""
            calls.extend(c.delta.tool_calls or [])
            finish = c.finish_reason or finish
    assert content == SAID and finish == "tool_calls"
    head = calls[0]
    assert (head.index, head.type, head.function.name) == (0, "function", "get_weather") and head.id
    assert all(c.index == 0 for c in calls)
    arguments = "".join(c.function.arguments or "" for c in calls)
    assert json.loads(arguments) == {"city": "Paris"}


async def test_auto_on_a_model_without_a_parser_is_refused(served):
    client, _ = served
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(
            model="plain", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS
        )
    assert caught.value.body["param"] == "tool_choice"
    assert "models[].tool_call_parser" in caught.value.body["message"]


async def test_an_unknown_tool_call_parser_is_refused_in_the_settings(tmp_path):
    with pytest.raises(pydantic.ValidationError, match="hermes"):
        ModelSettings(name="m", path=tmp_path, tool_call_parser="no-such-parser")
    assert ModelSettings(name="m", path=tmp_path, tool_call_parser="hermes").tool_call_parser == "hermes"


def _chat(content: str, model: str = "hermes-model", mode: int | None = None) -> inference_pb2.ChatRequest:
    request = inference_pb2.ChatRequest(
        model=model,
        messages=[common_pb2.ChatMessage(role="user", content=content)],
        tools=[common_pb2.Tool(name="get_weather", parameters_json=json.dumps(TOOLS[0]["function"]["parameters"]))],
    )
    if mode is not None:
        request.tool_choice.mode = mode
    return request


def _calls(calls) -> list[tuple[str, dict]]:
    assert all(c.id for c in calls)
    return [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("mode", [inference_pb2.TOOL_CHOICE_MODE_AUTO, None])
async def test_grpc_chat_auto_reads_the_tool_calls_with_the_models_parser(inference, mode):
    reply = await inference.Chat(_chat("weather?", mode=mode))
    (out,) = reply.outputs
    assert out.text == SAID + CALL  # the model's whole output, as audited
    assert _calls(out.tool_calls) == [("get_weather", {"city": "Paris"})]
    assert out.finish_reason == common_pb2.FINISH_REASON_STOP


async def test_grpc_chat_auto_without_a_tool_call_has_none(inference):
    reply = await inference.Chat(_chat("no tools", mode=inference_pb2.TOOL_CHOICE_MODE_AUTO))
    (out,) = reply.outputs
    assert (out.text, list(out.tool_calls)) == ("Sunny everywhere.", [])


async def test_grpc_chat_stream_auto_puts_the_calls_on_the_last_message(inference):
    messages = [m async for m in inference.ChatStream(_chat("weather?", mode=inference_pb2.TOOL_CHOICE_MODE_AUTO))]
    assert "".join(m.text for m in messages) == SAID + CALL
    last = [m for m in messages if m.finish_reason]
    assert len(last) == 1 and last[0].finish_reason == common_pb2.FINISH_REASON_STOP
    assert _calls(last[0].tool_calls) == [("get_weather", {"city": "Paris"})]
    assert all(not m.tool_calls for m in messages if not m.finish_reason)


async def test_grpc_chat_auto_on_a_model_without_a_parser_is_refused(inference):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Chat(_chat("weather?", model="plain"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "models[].tool_call_parser" in field_violations(caught.value)["tool_choice"]
