"""Tool calling on Chat, transport-neutral: the contract's ``tools``, ``tool_choice`` and
history ``tool_calls`` checked into what the chat template and the engine take.

Follows OpenAI's chat API and vLLM's OpenAI server: tools are shown to the model's chat
template (``apply_chat_template(tools=...)``); ``tool_choice`` ``"required"`` and a named
function are forced by structured output, a JSON Schema built from the tools as vLLM builds
it (``engine_backends.tool_calls.forced_tool_schema``), so any model answers with valid
calls; ``"auto"`` (the default when tools are given) needs the model's tool-call parser
(``check_auto``), as vLLM refuses it without ``--enable-auto-tool-choice --tool-call-parser``,
and its reply is read by that parser (``AutoReading``, for both front ends). A history
message's tool-call arguments (JSON text in the contract) reach the template as objects, as
vLLM passes them.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from engine_backends.tool_calls import forced_tool_schema
from service.operations.validation import Violations, check_constraint, check_text_size
from xinserve.v1 import common_pb2, inference_pb2

MAX_TOOLS = 128
"""Most tools one request may give (OpenAI's API allows 128)."""
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""A function name as OpenAI's API accepts it."""

ToolMode = Literal["none", "auto", "required", "named"]
_MODES = {
    inference_pb2.TOOL_CHOICE_MODE_NONE: "none",
    inference_pb2.TOOL_CHOICE_MODE_AUTO: "auto",
    inference_pb2.TOOL_CHOICE_MODE_REQUIRED: "required",
}


@dataclass(frozen=True)
class ToolPlan:
    """What a chat request asks of tools.

    ``tools``: OpenAI ``tools`` dicts for the chat template (None without tools); ``mode``:
    the effective tool choice; ``function_name``: the named function (mode ``named``);
    ``schema``: the forced output's JSON Schema as JSON text (modes ``required`` and
    ``named``), else None.
    """

    tools: list[dict[str, Any]] | None
    mode: ToolMode
    function_name: str | None = None
    schema: str | None = None


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def check_tools(request: inference_pb2.ChatRequest, v: Violations, limits: Any) -> ToolPlan:
    """Check ``tools`` and ``tool_choice`` of a chat request (violations added to ``v`` with
    the contract's field paths: ``tools[i].name``, ``tools[i].parameters_json``,
    ``tool_choice``); the plan is meaningful only when ``v`` stays empty."""
    tools: list[dict[str, Any]] = []
    names: set[str] = set()
    if len(request.tools) > MAX_TOOLS:
        v.add("tools", f"at most {MAX_TOOLS} tools, got {len(request.tools)}")
        return ToolPlan(None, "none")
    size = 0
    for i, tool in enumerate(request.tools):
        size += len(tool.name) + len(tool.description.encode("utf-8")) + len(tool.parameters_json.encode("utf-8"))
        if not TOOL_NAME.match(tool.name):
            v.add(f"tools[{i}].name", "must be 1..64 characters of a-z, A-Z, 0-9, underscore and dash")
        elif tool.name in names:
            v.add(f"tools[{i}].name", f"duplicates the name {tool.name!r} of an earlier tool")
        names.add(tool.name)
        function: dict[str, Any] = {"name": tool.name}
        if tool.description:
            function["description"] = tool.description
        if tool.parameters_json:
            parameters = _json_object(tool.parameters_json)
            if parameters is None:
                v.add(f"tools[{i}].parameters_json", "must be a JSON Schema object in JSON text")
            else:
                function["parameters"] = parameters
        tools.append({"type": "function", "function": function})
    check_text_size(v, "tools", size, limits)
    choice = request.tool_choice if request.HasField("tool_choice") else None
    which = choice.WhichOneof("choice") if choice is not None else None
    if which == "function_name" and choice is not None and not choice.function_name:
        v.add("tool_choice", "function_name must name one of tools; it is empty")
        mode: ToolMode = "none"
    elif which == "function_name":
        mode = "named"
    elif which == "mode" and choice is not None and choice.mode in _MODES:
        mode = _MODES[choice.mode]  # type: ignore[assignment]
    elif which is not None:
        v.add(
            "tool_choice",
            "must be mode TOOL_CHOICE_MODE_NONE, TOOL_CHOICE_MODE_AUTO or TOOL_CHOICE_MODE_REQUIRED, "
            f"or a function_name; got mode {choice.mode if choice is not None else 0}",
        )
        mode = "none"
    else:
        mode = "auto" if tools else "none"
    if not tools:
        if mode != "none":
            v.add("tool_choice", "needs tools")
        return ToolPlan(None, "none")
    if mode in ("auto", "none"):
        return ToolPlan(tools, mode)
    name = choice.function_name if mode == "named" and choice is not None else None
    if name is not None and name not in names:
        v.add("tool_choice", f"names the function {name[:64]!r}, which is not one of tools")
        return ToolPlan(tools, mode, name)
    # The forced output is compiled from these schemas: each is a structured-output constraint.
    for i, tool in enumerate(request.tools):
        if tool.parameters_json and (name is None or tool.name == name):
            check_constraint(v, f"tools[{i}].parameters_json", tool.parameters_json, "json_schema", limits)
    if v.items:
        return ToolPlan(tools, mode, name)
    parallel = request.parallel_tool_calls if request.HasField("parallel_tool_calls") else None
    try:
        schema = forced_tool_schema(tools, name, parallel)
    except ValueError:
        v.add("tools", "the tools' parameter schemas cannot be combined into one schema (conflicting $defs)")
        return ToolPlan(tools, mode, name)
    return ToolPlan(tools, mode, name, json.dumps(schema, ensure_ascii=False, separators=(",", ":")))


def add_history_tool_fields(request: inference_pb2.ChatRequest, messages: list[dict[str, Any]], v: Violations) -> int:
    """Add each message's ``tool_calls`` (arguments parsed to objects) and ``tool_call_id``
    to the template dicts ``messages`` (one per request message, in order); returns the
    UTF-8 bytes they hold. Violations, as OpenAI's chat API refuses them:
    ``messages[i].tool_calls`` on a message that is not the assistant's,
    ``messages[i].tool_calls[j].id`` missing, ``.name`` missing or not a function name,
    ``.arguments`` not a JSON object in JSON text, ``messages[i].tool_call_id`` missing on a
    tool message or present on another."""
    size = 0
    for i, (message, entry) in enumerate(zip(request.messages, messages, strict=False)):
        if message.tool_calls:
            if message.role != "assistant":
                v.add(f"messages[{i}].tool_calls", "only an assistant message carries tool calls")
            calls = []
            for j, call in enumerate(message.tool_calls):
                size += len(call.id) + len(call.name) + len(call.arguments.encode("utf-8"))
                if not call.id:
                    v.add(f"messages[{i}].tool_calls[{j}].id", "is required: the id the tool's answer names")
                if not call.name:
                    v.add(f"messages[{i}].tool_calls[{j}].name", "is required: the name of the function called")
                elif not TOOL_NAME.match(call.name):
                    v.add(f"messages[{i}].tool_calls[{j}].name", "must be 1..64 of a-z, A-Z, 0-9, _ and -")
                arguments = _json_object(call.arguments or "{}")
                if arguments is None:
                    v.add(f"messages[{i}].tool_calls[{j}].arguments", "must be a JSON object in JSON text")
                calls.append(
                    {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments or {}}}
                )
            entry["tool_calls"] = calls
        if message.role == "tool" and not message.tool_call_id:
            v.add(f"messages[{i}].tool_call_id", "is required in a tool message: the id of the tool call it answers")
        if message.HasField("tool_call_id"):
            if message.role != "tool":
                v.add(f"messages[{i}].tool_call_id", "only a tool message answers a tool call")
            size += len(message.tool_call_id.encode("utf-8"))
            entry["tool_call_id"] = message.tool_call_id
    return size


def check_auto(plan: ToolPlan, parser: str | None, v: Violations) -> None:
    """Refuse ``tool_choice: "auto"`` (``tool_choice`` violation) for a model without a
    tool-call parser (``ModelInfo.tool_call_parser``)."""
    if plan.mode == "auto" and parser is None:
        v.add(
            "tool_choice",
            '"auto" (the default when tools are given) needs a tool-call parser, and none is '
            'configured for this model (models[].tool_call_parser); give "none", "required" or a named function',
        )


def tool_call_id() -> str:
    """A new tool call id: ``call_`` and 24 random hex digits (OpenAI's ``call_...`` form)."""
    return "call_" + secrets.token_hex(12)


def forced_calls(text: str, plan: ToolPlan) -> list[common_pb2.ToolCall]:
    """The tool calls in a reply whose text structured output forced (``plan.schema`` set):
    vLLM's ``[{"name", "parameters"}, ...]`` for ``required``, the function's arguments
    object for ``named``; empty when the text is not that JSON (cut by ``max_tokens``).
    Arguments are JSON text; each call gets a new id."""
    if plan.schema is None:
        return []
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return []
    if plan.mode == "named":
        calls = [(plan.function_name or "", value)] if isinstance(value, dict) else []
    elif isinstance(value, list) and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in value):
        calls = [(c["name"], c.get("parameters", {})) for c in value]
    else:
        calls = []
    return [
        common_pb2.ToolCall(id=tool_call_id(), name=name, arguments=json.dumps(arguments, ensure_ascii=False))
        for name, arguments in calls
    ]


@dataclass(frozen=True)
class ToolDelta:
    """The tool-call parser's reading of one streamed message (``tool_choice: "auto"``).

    ``content``: the part of the message's text that is content (None: none); ``calls``: the
    parser's OpenAI tool-call deltas (``index`` and the parts present: ``id``, ``type``,
    ``function.name``, ``function.arguments``); ``rest``: on an index's last message, the
    delta with the last call's arguments the parser held back (None: nothing held back);
    ``first``: the index's first message; ``called``: the reply has begun a tool call.
    """

    content: str | None
    calls: list[dict[str, Any]]
    rest: dict[str, Any] | None
    first: bool
    called: bool


def proto_calls(calls: Sequence[Mapping[str, Any]]) -> list[common_pb2.ToolCall]:
    """OpenAI ``tool_calls`` dicts (``{"id", "function": {"name", "arguments"}}``) as the
    contract's ``ToolCall`` messages; a call without an id gets a new one."""
    out = []
    for call in calls:
        function = call.get("function") or {}
        out.append(
            common_pb2.ToolCall(
                id=call.get("id") or tool_call_id(),
                name=str(function.get("name") or ""),
                arguments=str(function.get("arguments") or ""),
            )
        )
    return out


class AutoReading:
    """The model's tool-call parser (vLLM's, ``Engine.auto_tool_calls``) reading the replies
    of one ``tool_choice: "auto"`` chat: each whole reply (``whole``), or each streamed
    message of a reply (``delta``), one parser per completion index, as vLLM's OpenAI
    server reads them.

    Args:
        new_reader: makes one ``engine_backends.tool_calls.AutoToolCalls`` (a reader keeps
            the state of one reply).
    """

    def __init__(self, new_reader: Callable[[], Any]) -> None:
        self._new = new_reader
        self._readers: dict[int, Any] = {}

    def whole(self, text: str) -> tuple[str | None, list[common_pb2.ToolCall]]:
        """``(content, tool calls)`` of a whole reply; without calls ``(text, [])``."""
        content, found = self._new().extract(text)
        if not found:
            return text, []
        return content, proto_calls(found)

    def delta(self, index: int, text: str, token_ids: Sequence[int], finished: bool) -> ToolDelta:
        """The reading of index ``index``'s next streamed message (``finished``: its last)."""
        reader = self._readers.get(index)
        first = reader is None
        if reader is None:
            reader = self._readers[index] = self._new()
        content, calls = reader.stream(text, list(token_ids)) if text or token_ids else (None, [])
        rest = None
        called = bool(reader.called)
        if finished:
            self._readers.pop(index, None)
            if called:
                held = reader.remaining_arguments()
                if held:
                    rest = {"index": reader.called - 1, "function": {"arguments": held}}
        return ToolDelta(content or None, calls, rest, first, called)
