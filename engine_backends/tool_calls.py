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


def tool_parser_names() -> list[str]:
    """The names vLLM's ``ToolParserManager`` knows (``--tool-call-parser`` choices)."""
    from vllm.tool_parsers import ToolParserManager

    return sorted(ToolParserManager.list_registered())


class AutoToolCalls:
    """vLLM's tool parser ``name`` (``ToolParserManager``) reading the tool calls of one
    reply generated with ``tool_choice: "auto"``, whole (``extract``) or as it streams
    (``stream``). Tool calls come back as OpenAI dicts: ``{"id", "type": "function",
    "function": {"name", "arguments"}}`` (whole), or the parser's deltas (``index`` and the
    parts present: ``id``, ``type``, ``function.name``, ``function.arguments``).

    Raises:
        KeyError: ``name`` is not a registered parser.
    """

    def __init__(self, name: str, tokenizer: Any, tools: Sequence[Mapping[str, Any]]) -> None:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.tool_parsers import ToolParserManager

        self._request = ChatCompletionRequest.model_validate(
            {
                "model": "m",
                "messages": [{"role": "user", "content": ""}],
                "tools": [dict(t) for t in tools],
                "tool_choice": "auto",
            }
        )
        self._parser = ToolParserManager.get_tool_parser(name)(tokenizer, list(self._request.tools or []))  # type: ignore[arg-type]
        self._text = ""
        self._ids: list[int] = []

    def extract(self, text: str) -> tuple[str | None, list[dict[str, Any]]]:
        """``(content, tool_calls)`` of a whole reply; no calls: ``(text, [])``."""
        info = self._parser.extract_tool_calls(text, self._request)
        if not info.tools_called or not info.tool_calls:
            return text, []
        calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in info.tool_calls
        ]
        return info.content, calls

    def stream(self, delta_text: str, delta_ids: Sequence[int]) -> tuple[str | None, list[dict[str, Any]]]:
        """``(content delta, tool-call deltas)`` for the next streamed piece of the reply."""
        previous_text, previous_ids = self._text, self._ids
        self._text = previous_text + delta_text
        self._ids = [*previous_ids, *delta_ids]
        delta = self._parser.extract_tool_calls_streaming(
            previous_text, self._text, delta_text, previous_ids, self._ids, list(delta_ids), self._request
        )
        if delta is None:
            return None, []
        return delta.content, [call.model_dump(exclude_none=True) for call in delta.tool_calls]

    def remaining_arguments(self) -> str:
        """Arguments of the last tool call the parser read but has not streamed yet."""
        return str(self._parser.get_remaining_unstreamed_args())

    @property
    def called(self) -> int:
        """How many tool calls the stream has begun."""
        return len(self._parser.prev_tool_call_arr)
