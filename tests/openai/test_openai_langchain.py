"""LangChain's ``ChatOpenAI`` (langchain-openai) against the live server's OpenAI API, the
session's tiny model: ``with_structured_output(method="function_calling")`` and
``bind_tools`` with a named tool choice answer with valid tool calls; ``bind_tools`` with
LangChain's default choice (``auto``) on a model without a tool-call parser is refused with
400 naming ``tool_choice``, as vLLM refuses it without ``--tool-call-parser``."""

from __future__ import annotations

from typing import Literal

import openai
import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from tests.conftest import TINY

pytestmark = pytest.mark.asyncio(loop_scope="session")

CITIES = ("Paris", "Rome")


class Weather(BaseModel):
    """The weather asked for: which city."""

    city: Literal["Paris", "Rome"]


@tool
def get_weather(city: Literal["Paris", "Rome"]) -> str:
    """Weather in a city."""
    return f"sunny in {city}"


def chat(http_server) -> ChatOpenAI:  # type: ignore[no-untyped-def]
    return ChatOpenAI(
        model=TINY,
        base_url=http_server.base_url,
        api_key="unused",
        max_retries=0,
        timeout=120,
        temperature=0,
        max_tokens=64,
    )


async def test_with_structured_output_by_function_calling_returns_the_model(http_server):
    structured = chat(http_server).with_structured_output(Weather, method="function_calling")
    answer = await structured.ainvoke("What is the weather in Paris?")
    assert isinstance(answer, Weather) and answer.city in CITIES


async def test_bind_tools_with_a_named_tool_choice_calls_the_tool(http_server):
    # Named, not "required": the tiny test model's random weights spend the tokens of
    # "required"'s array of calls on the whitespace JSON allows (tests/openai/test_openai_tools.py
    # covers "required" with the openai SDK).
    bound = chat(http_server).bind_tools([get_weather], tool_choice="get_weather")
    message = await bound.ainvoke("What is the weather in Rome?")
    assert isinstance(message, AIMessage) and len(message.tool_calls) >= 1
    call = message.tool_calls[0]
    assert call["name"] == "get_weather" and call["args"]["city"] in CITIES and call["id"]
    assert get_weather.invoke(call["args"]) in {f"sunny in {c}" for c in CITIES}


async def test_bind_tools_with_the_default_auto_choice_is_refused_without_a_parser(http_server):
    with pytest.raises(openai.BadRequestError) as err:
        await chat(http_server).bind_tools([get_weather]).ainvoke("What is the weather in Rome?")
    assert err.value.status_code == 400 and "tool_choice" in str(err.value)
