"""Forced tool calls from the built-in chat model (smollm2-135m-instruct) through the
official ``openai`` SDK: ``tool_choice`` ``"required"`` and a named function answer with
valid calls matching the tools' schemas, as structured output enforces them."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
import pytest_asyncio

from service.frontends.openai.listener import HttpFrontend
from service.settings.config import load_settings
from tests.smollm2.conftest import SMOLLM2, _data_dir

pytestmark = pytest.mark.asyncio(loop_scope="session")

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"type": "string", "enum": ["C", "F"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Time now", "parameters": {"type": "object"}}},
]
ASK = [{"role": "user", "content": "What is the weather in Paris, in Celsius?"}]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def sdk(smollm2_server):
    settings = load_settings(
        overrides={
            "data_dir": str(_data_dir()),
            "metrics_listen": None,
            "listen": {"plaintext": ["127.0.0.1:0"], "http": ["127.0.0.1:0"]},
        }
    )
    grpc_frontend = smollm2_server.server.frontend
    frontend = HttpFrontend(grpc_frontend.core, grpc_frontend.inference, settings)
    await frontend.start()
    port = next(iter(frontend.ports.values()))
    try:
        yield openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=300)
    finally:
        await frontend.stop()


async def test_required_tool_choice(sdk):
    reply = await sdk.chat.completions.create(
        model=SMOLLM2, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=80, temperature=0
    )
    (choice,) = reply.choices
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.tool_calls
    for call in choice.message.tool_calls:
        schema = WEATHER if call.function.name == "get_weather" else {"type": "object"}
        jsonschema.validate(json.loads(call.function.arguments), schema)


async def test_named_tool_choice(sdk):
    reply = await sdk.chat.completions.create(
        model=SMOLLM2,
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=60,
        temperature=0,
    )
    (choice,) = reply.choices
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and choice.finish_reason == "stop"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
