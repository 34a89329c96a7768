"""Tool calling as vLLM's OpenAI server does it: the JSON Schema that forces a ``required``
or named ``tool_choice`` through structured output (``vllm.tool_parsers.utils.
get_json_schema_from_tools``).

Tools are OpenAI chat ``tools`` entries as dicts: ``{"type": "function", "function":
{"name", "description", "parameters"}}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vllm.entrypoints.openai.chat_completion.protocol import (
    ChatCompletionNamedToolChoiceParam,
    ChatCompletionToolsParam,
)
from vllm.tool_parsers.utils import get_json_schema_from_tools


def forced_tool_schema(
    tools: Sequence[Mapping[str, Any]], function_name: str | None, parallel_tool_calls: bool | None
) -> dict[str, Any]:
    """The JSON Schema the output must match, as vLLM builds it.

    ``function_name`` None is ``tool_choice: "required"``: an array of at least one
    ``{"name": <a tool's name>, "parameters": <its arguments>}`` object (at most one when
    ``parallel_tool_calls`` is False). A name is the named tool choice: that function's
    ``parameters`` schema (an empty object schema when it has none), the output being the
    arguments object itself.

    Raises:
        ValueError: ``function_name`` is not one of ``tools``, or the tools' ``$defs``
            conflict (vLLM's ``VLLMValidationError`` is a ValueError).
    """
    params = [ChatCompletionToolsParam.model_validate(dict(tool)) for tool in tools]
    choice: Any = "required"
    if function_name is not None:
        choice = ChatCompletionNamedToolChoiceParam.model_validate(
            {"type": "function", "function": {"name": function_name}}
        )
    schema = get_json_schema_from_tools(choice, params, parallel_tool_calls)  # type: ignore[arg-type]
    if not isinstance(schema, dict):
        raise ValueError("no schema for this tool choice")
    return schema
