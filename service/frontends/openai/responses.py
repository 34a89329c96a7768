"""OpenAI's Responses API (``POST /v1/responses``) for text: the request as the contract's
``ChatRequest``, and the chat reply as a ``response`` object or as the Responses stream events
(OpenAI API reference, "Responses" and "Streaming events"; the event sequence vLLM's
``OpenAIServingResponses`` sends for a text reply).

Served: ``input`` as a string or a list of ``message`` items (roles ``user``, ``system``,
``developer``, ``assistant``; content a string or ``input_text``/``output_text`` parts),
``instructions`` (a system message ahead of the input), ``max_output_tokens``,
``temperature``, ``top_p``, ``metadata`` (echoed), ``user``, ``stream``. Nothing is stored:
``store: true``, ``previous_response_id``, ``conversation``, ``background: true`` are
refused, as are ``tools`` (and a ``tool_choice`` other than ``none``/``auto``), ``reasoning``,
``include``, ``top_logprobs``, ``truncation: "auto"``, ``prompt`` and a ``text.format``
other than ``text``: each a 400 naming the field. Other fields are ignored, as on the other
routes.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator
from typing import Any, Literal

from service.core.status import FieldViolation, RpcError, invalid_argument
from service.frontends.openai.schemas import _Body
from xinserve.v1 import common_pb2, inference_pb2, sampling_pb2


class InputPart(_Body):
    """One part of a message item's ``content``: ``input_text`` or ``output_text``."""

    type: str
    text: str | None = None


class InputItem(_Body):
    """One item of ``input``; only ``message`` items (``type`` absent or ``message``) are served."""

    type: str | None = None
    role: str | None = None
    content: str | list[InputPart] | None = None


class ResponsesBody(_Body):
    """``POST /v1/responses``: the fields served, and those refused when set."""

    model: str
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool | None = False
    metadata: dict[str, str] | None = None
    user: str | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    background: bool | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    reasoning: Any = None
    include: list[Any] | None = None
    top_logprobs: int | None = None
    truncation: Literal["auto", "disabled"] | None = None
    text: dict[str, Any] | None = None


_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


def _refuse(field: str, why: str) -> None:
    raise invalid_argument([FieldViolation(field, why)])


def _refuse_unserved(body: ResponsesBody) -> None:
    extra = body.model_extra or {}
    if body.store:
        _refuse("store", "responses are not stored by this server; send store: false or leave it out")
    if body.previous_response_id is not None:
        _refuse("previous_response_id", "is not supported (responses are not stored); send the whole input")
    for name in ("conversation", "prompt"):
        if extra.get(name) is not None:
            _refuse(name, "is not supported; send the whole input")
    if body.background:
        _refuse("background", "background responses are not supported")
    if body.tools:
        _refuse("tools", "tools are not supported on /v1/responses; use /v1/chat/completions")
    if body.tool_choice is not None and body.tool_choice not in ("none", "auto"):
        _refuse("tool_choice", "is not supported on /v1/responses; use /v1/chat/completions")
    if body.reasoning is not None:
        _refuse("reasoning", "is not supported")
    if body.include:
        _refuse("include", "is not supported")
    if body.top_logprobs:
        _refuse("top_logprobs", "is not supported on /v1/responses; use /v1/chat/completions")
    if body.truncation == "auto":
        _refuse("truncation", "only disabled is supported")
    fmt = (body.text or {}).get("format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
        _refuse("text.format", "only the text format is supported")


def _item_text(i: int, item: InputItem) -> str:
    if item.content is None:
        _refuse(f"input[{i}].content", "is required")
    if isinstance(item.content, str):
        return item.content
    parts = []
    for j, part in enumerate(item.content or ()):
        if part.type not in ("input_text", "output_text") or part.text is None:
            _refuse(f"input[{i}].content[{j}]", "only input_text and output_text parts are supported")
        parts.append(part.text or "")
    return "".join(parts)


def chat_request(body: ResponsesBody) -> inference_pb2.ChatRequest:
    """The ``ChatRequest`` a Responses body stands for: ``instructions`` as a system message,
    then the input's messages; ``max_output_tokens`` as ``max_tokens``.

    Raises:
        RpcError: INVALID_ARGUMENT naming the field for what is not served (module docstring),
            an item that is no message (``input[i].type``), a role other than ``user``,
            ``system``, ``developer`` or ``assistant`` (``input[i].role``), and a content
            part other than text (``input[i].content[j]``).
    """
    _refuse_unserved(body)
    req = inference_pb2.ChatRequest(model=body.model)
    if body.instructions is not None:
        req.messages.add(role="system", content=body.instructions)
    if isinstance(body.input, str):
        req.messages.add(role="user", content=body.input)
    else:
        for i, item in enumerate(body.input):
            if item.type not in (None, "message"):
                _refuse(f"input[{i}].type", "only message items are supported")
            role = _ROLES.get(item.role or "")
            if role is None:
                _refuse(f"input[{i}].role", "must be user, system, developer or assistant")
            req.messages.add(role=role, content=_item_text(i, item))
    sp = sampling_pb2.SamplingParams()
    for name, value in (
        ("max_tokens", body.max_output_tokens),
        ("temperature", body.temperature),
        ("top_p", body.top_p),
    ):
        if value is not None:
            try:
                setattr(sp, name, value)
            except (TypeError, ValueError, OverflowError):
                _refuse("max_output_tokens" if name == "max_tokens" else name, "is out of range for the field")
    req.sampling_params.CopyFrom(sp)
    return req


_MESSAGE_PATH = re.compile(r"^messages\[(\d+)\](.*)$")


def responses_error(err: RpcError, body: ResponsesBody) -> RpcError:
    """``err`` of the chat call with the Responses fields named: ``max_output_tokens`` for
    ``max_tokens``, ``input[i]`` (or ``instructions``) for ``messages[k]``."""
    if not err.violations:
        return err
    offset = 1 if body.instructions is not None else 0
    named = []
    for v in err.violations:
        field = v.field.removeprefix("sampling_params.")
        if field == "max_tokens":
            field = "max_output_tokens"
        match = _MESSAGE_PATH.match(field)
        if match:
            k = int(match.group(1))
            if k < offset:
                field = "instructions"
            elif isinstance(body.input, str):
                field = "input"
            else:
                field = f"input[{k - offset}]{match.group(2)}"
        elif field == "messages":
            field = "input"
        named.append(FieldViolation(field, v.description))
    return dataclasses.replace(invalid_argument(named, err.reason), code=err.code, metadata=err.metadata)


def _usage(u: common_pb2.Usage) -> dict[str, Any]:
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }


class ResponseObject:
    """The ``response`` object of one call, as it evolves (``in_progress`` → ``completed``, or
    ``incomplete`` with ``incomplete_details.reason: max_output_tokens`` when cut by it)."""

    def __init__(self, body: ResponsesBody, request_id: str) -> None:
        self.body = body
        self.id = f"resp_{request_id}"
        self.message_id = f"msg_{request_id}"
        self.created_at = int(time.time())

    def part(self, text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def message(self, text: str | None, status: str) -> dict[str, Any]:
        content = [] if text is None else [self.part(text)]
        return {"id": self.message_id, "type": "message", "status": status, "role": "assistant", "content": content}

    def render(
        self, status: str, text: str | None = None, usage: common_pb2.Usage | None = None, cut: bool = False
    ) -> dict[str, Any]:
        body = self.body
        done = status != "in_progress"
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens,
            "model": body.model,
            "output": [self.message(text, "incomplete" if cut else "completed")] if done else [],
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": None,
            "store": False,
            "temperature": body.temperature,
            "text": {"format": {"type": "text"}},
            "tool_choice": body.tool_choice or "auto",
            "tools": [],
            "top_p": body.top_p,
            "truncation": "disabled",
            "usage": _usage(usage) if usage is not None else None,
            "user": body.user,
            "metadata": body.metadata or {},
        }


def response_object(reply: inference_pb2.ChatResponse, body: ResponsesBody) -> dict[str, Any]:
    """The ``response`` object for a whole chat reply."""
    output = reply.outputs[0]
    cut = output.finish_reason == common_pb2.FINISH_REASON_LENGTH
    return ResponseObject(body, reply.request_id).render(
        "incomplete" if cut else "completed", output.text, reply.usage, cut
    )


class StreamEvents:
    """The Responses stream events of one reply, each with its ``sequence_number``:
    ``response.created``, ``response.in_progress``, ``response.output_item.added``,
    ``response.content_part.added``, one ``response.output_text.delta`` per text delta,
    ``response.output_text.done``, ``response.content_part.done``,
    ``response.output_item.done``, then ``response.completed`` (``response.incomplete``
    when cut by ``max_output_tokens``)."""

    def __init__(self, body: ResponsesBody, request_id: str) -> None:
        self.response = ResponseObject(body, request_id)
        self.sequence = 0
        self.text: list[str] = []
        self.started = False
        self._final: tuple[str, str, bool] = ("completed", "", False)

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _where(self) -> dict[str, Any]:
        return {"item_id": self.response.message_id, "output_index": 0, "content_index": 0}

    def events(self, msg: inference_pb2.ChatStreamResponse) -> Iterator[dict[str, Any]]:
        """The events one ``ChatStreamResponse`` of index 0 adds."""
        r = self.response
        if not self.started:
            self.started = True
            yield self._event("response.created", response=r.render("in_progress"))
            yield self._event("response.in_progress", response=r.render("in_progress"))
            yield self._event("response.output_item.added", output_index=0, item=r.message(None, "in_progress"))
            yield self._event("response.content_part.added", **self._where(), part=r.part(""))
        if msg.text:
            self.text.append(msg.text)
            yield self._event("response.output_text.delta", **self._where(), delta=msg.text, logprobs=[])
        if msg.finish_reason:
            text = "".join(self.text)
            cut = msg.finish_reason == common_pb2.FINISH_REASON_LENGTH
            status = "incomplete" if cut else "completed"
            yield self._event("response.output_text.done", **self._where(), text=text, logprobs=[])
            yield self._event("response.content_part.done", **self._where(), part=r.part(text))
            yield self._event("response.output_item.done", output_index=0, item=r.message(text, status))
            self._final = (status, text, cut)
        if msg.HasField("usage"):
            status, text, cut = self._final
            yield self._event(f"response.{status}", response=r.render(status, text, msg.usage, cut))

    def error(self, body: dict[str, Any]) -> dict[str, Any]:
        """The ``error`` event for an OpenAI error object ``{"error": {...}}``."""
        e = body["error"]
        return self._event("error", code=e.get("code"), message=e.get("message"), param=e.get("param"))
