"""OpenAI request bodies → the contract's request messages, and the contract's replies →
OpenAI response objects (OpenAI API reference: completions, chat completions, embeddings).

The OpenAI front end runs the same operations as gRPC (``service.operations.inference``) on the
messages built here, so validation, limits and engine behaviour are the same. Field
violations come back with the contract's paths (``sampling_params.top_p``) and are renamed
to the OpenAI field (``top_p``) by ``openai_param``.

Structured output comes from one of: the contract-named fields ``json_schema``, ``regex``,
``choice``, ``grammar``, ``json_object``; vLLM's ``structured_outputs`` object; chat's
``response_format``. More than one is INVALID_ARGUMENT naming them all (over gRPC the
``structured_output`` oneof admits one). ``lora_name`` selects a LoRA adapter as over gRPC.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import time
from typing import Any

from service.core.status import FieldViolation, invalid_argument
from service.frontends.openai.schemas import (
    SAMPLING_EXTRAS,
    ChatBody,
    ChatMessage,
    CompletionBody,
    DetokenizeBody,
    EmbeddingBody,
    TokenizeBody,
    _Sampling,
)
from service.operations.tools import ToolDelta
from xinserve.v1 import common_pb2, inference_pb2, sampling_pb2
from xinserve_client.sampling_fields import REPEATED_SCALARS, STRUCTURED_OUTPUT

_FINISH: dict[int, str] = {
    common_pb2.FINISH_REASON_STOP: "stop",
    common_pb2.FINISH_REASON_STOP_SEQUENCE: "stop",
    common_pb2.FINISH_REASON_LENGTH: "length",
    common_pb2.FINISH_REASON_TIME_LIMIT: "length",
    common_pb2.FINISH_REASON_CANCELLED: "abort",
    common_pb2.FINISH_REASON_ERROR: "error",
}
_TOOL_MODES = {
    "none": inference_pb2.TOOL_CHOICE_MODE_NONE,
    "auto": inference_pb2.TOOL_CHOICE_MODE_AUTO,
    "required": inference_pb2.TOOL_CHOICE_MODE_REQUIRED,
}
# Contract field paths whose OpenAI name differs (prefix "sampling_params." is dropped first).
_RENAMED = {
    "inputs": "input",
    "prompt_token_ids": "prompt",
    "choice.choices": "choice",
    "text": "prompt",  # Tokenize's text is /tokenize's prompt
    "token_ids": "tokens",  # Detokenize's token_ids are /detokenize's tokens
}
# vLLM's request fields removed in vLLM 0.12 → the field that replaces each here.
_REMOVED = {
    "guided_json": "json_schema",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
}
# vLLM's structured_outputs keys → the contract's structured_output members.
_VLLM_STRUCTURED = {
    "json": "json_schema",
    "regex": "regex",
    "choice": "choice",
    "grammar": "grammar",
    "json_object": "json_object",
}


# Contract paths of tool fields → their OpenAI paths.
_TOOL_PATHS = (
    (re.compile(r"^tools\[(\d+)\]\.parameters_json$"), r"tools[\1].function.parameters"),
    (re.compile(r"^tools\[(\d+)\]\.name$"), r"tools[\1].function.name"),
    (re.compile(r"^(messages\[\d+\]\.tool_calls\[\d+\])\.(name|arguments)$"), r"\1.function.\2"),
)


def openai_param(field: str, chat: bool = False) -> str:
    """The OpenAI request field for a contract field path (``sampling_params.top_p`` → ``top_p``,
    ``tools[0].parameters_json`` → ``tools[0].function.parameters``)."""
    for pattern, replacement in _TOOL_PATHS:
        if pattern.match(field):
            return pattern.sub(replacement, field)
    name = field.removeprefix("sampling_params.")
    head, sep, rest = name.partition("[")
    if chat and head == "logprobs" and name != field:  # the contract's logprobs is chat's top_logprobs
        return "top_logprobs"
    if head.startswith("inputs"):
        return "input" + (sep + rest if sep else "")
    if chat and head == "json_schema" and name != field:  # as the engine names response_format's schema
        return "response_format" + (sep + rest if sep else "")
    return _RENAMED.get(head, head) + (sep + rest if sep else "")


def _refuse(field: str, why: str) -> None:
    raise invalid_argument([FieldViolation(field, why)])


def _sampling(body: _Sampling, max_tokens: int | None) -> sampling_pb2.SamplingParams:
    if body.stream_options is not None and body.stream_options.continuous_usage_stats:
        _refuse("stream_options.continuous_usage_stats", "is not supported; use stream_options.include_usage")
    if (body.model_extra or {}).get("prompt_logprobs") is not None:
        _refuse("prompt_logprobs", "is not returned by the OpenAI-compatible API; use gRPC Generate")
    sp = sampling_pb2.SamplingParams()
    for name in ("n", "seed", "temperature", "top_p", "presence_penalty", "frequency_penalty"):
        value = getattr(body, name)
        if value is not None:
            _assign(sp, name, value)
    if max_tokens is not None:
        _assign(sp, "max_tokens", max_tokens)
    if body.stop is not None:
        sp.stop.extend([body.stop] if isinstance(body.stop, str) else body.stop)
    for key, bias in (body.logit_bias or {}).items():
        try:
            token = int(key)
        except ValueError:
            _refuse(f"logit_bias[{key[:32]}]", "keys must be token ids")
        if not -(2**31) <= token < 2**31:
            _refuse(f"logit_bias[{key[:32]}]", "token id out of range")
        sp.logit_bias[token] = bias
    # vLLM's extra sampling parameters, by their contract names (derived from the descriptor;
    # their JSON types were checked by service.frontends.openai.schemas.parse_body). null = absent.
    extra = body.model_extra or {}
    for name in SAMPLING_EXTRAS:
        value = extra.get(name)
        if value is None:
            continue
        if name in REPEATED_SCALARS:
            try:
                getattr(sp, name).extend(value)
            except (TypeError, ValueError, OverflowError):
                _refuse(name, "has an element out of range for the field")
        else:
            _assign(sp, name, value)
    if extra.get("lora_name") is not None:
        sp.lora_name = extra["lora_name"]
    return sp


def _structured_sources(body: _Sampling) -> list[tuple[str, str, Any]]:
    """The structured-output constraints a body gives, as ``(request field, contract
    member, value)``: the contract-named fields, then vLLM's ``structured_outputs`` members
    (``structured_outputs.regex``). null is absent. Refuses vLLM's removed ``guided_*``
    fields and ``structured_outputs`` keys other than its constraints."""
    extra = body.model_extra or {}
    for old, new in _REMOVED.items():
        if extra.get(old) is not None:
            _refuse(old, f"was removed in vLLM 0.12 and is not supported; use {new} instead")
    found = [(name, name, extra[name]) for name in STRUCTURED_OUTPUT if extra.get(name) is not None]
    vllm = extra.get("structured_outputs")
    if vllm is not None:
        given = [key for key, value in vllm.items() if value is not None]
        for key in given:
            if key not in _VLLM_STRUCTURED:
                _refuse(
                    f"structured_outputs.{key[:64]}",
                    "is not supported; give one of json, regex, choice, grammar or json_object "
                    "(or the top-level json_schema, regex, choice, grammar or json_object)",
                )
        if not given:
            _refuse("structured_outputs", "needs one of json, regex, choice, grammar or json_object")
        found.extend((f"structured_outputs.{key}", _VLLM_STRUCTURED[key], vllm[key]) for key in given)
    return found


def _apply_structured(sp: sampling_pb2.SamplingParams, found: list[tuple[str, str, Any]]) -> None:
    """Set the ``structured_output`` member of ``sp`` from at most one constraint (a JSON
    Schema object is serialised to the contract's JSON text); several are INVALID_ARGUMENT
    naming each, as vLLM refuses more than one kind of constraint."""
    if len(found) > 1:
        names = ", ".join(field for field, _, _ in found)
        _refuse(found[0][0], f"at most one structured-output field may be given, got {names}")
    for field, member, value in found:
        if value == "":  # named as the request gave it (the contract's check would say json_schema)
            _refuse(field, "must not be empty")
        if member == "choice":
            sp.choice.choices.extend(value)
        elif member == "json_schema" and not isinstance(value, str):
            sp.json_schema = json.dumps(value, ensure_ascii=False)
        else:
            setattr(sp, member, value)


def _assign(sp: sampling_pb2.SamplingParams, name: str, value: Any, field: str | None = None) -> None:
    """Set a field whose JSON type was checked; refuses (naming ``field``, default ``name``)
    a value the field cannot hold."""
    try:
        setattr(sp, name, value)
    except (TypeError, ValueError, OverflowError):
        _refuse(field or name, "is out of range for the field")


def _prompts(prompt: str | list[str] | list[int] | list[list[int]]) -> list[str | list[int]]:
    """The prompts of a completions ``prompt``: a string or one token-id list is one prompt,
    a list of strings or of token-id lists one prompt each (an empty list is one empty prompt)."""
    if isinstance(prompt, str):
        return [prompt]
    if not prompt or isinstance(prompt[0], int):
        return [prompt]  # type: ignore[list-item]
    return list(prompt)  # type: ignore[arg-type]


def completion_requests(body: CompletionBody, max_prompts: int) -> list[inference_pb2.GenerateRequest]:
    """One ``GenerateRequest`` per prompt of ``POST /v1/completions`` (OpenAI's ``prompt``: a
    string, a list of strings, a token-id list or a list of token-id lists), each with the
    body's sampling parameters and an empty ``request_id``.

    Raises:
        RpcError: INVALID_ARGUMENT naming ``prompt`` for more than ``max_prompts`` prompts
            (``prompt[i]`` for a token id outside 32 bits), and for what this server cannot
            honour (``echo``, ``suffix``, ``best_of`` other than ``n``, ``prompt_logprobs``,
            ``stream_options.continuous_usage_stats``), for more than one structured-output
            field, and for vLLM's removed ``guided_*`` fields.
    """
    if body.echo:
        _refuse("echo", "is not supported")
    if body.suffix:
        _refuse("suffix", "is not supported")
    if body.best_of is not None and body.best_of != (body.n or 1):
        _refuse("best_of", "is not supported (it must equal n)")
    prompts = _prompts(body.prompt)
    if len(prompts) > max_prompts:
        _refuse(
            "prompt", f"at most {max_prompts} prompts per request (limits.max_completion_prompts), got {len(prompts)}"
        )
    sp = _sampling(body, body.max_tokens)
    _apply_structured(sp, _structured_sources(body))
    if body.logprobs is not None:
        _assign(sp, "logprobs", body.logprobs)
    requests = []
    for i, prompt in enumerate(prompts):
        req = inference_pb2.GenerateRequest(model=body.model, sampling_params=sp)
        if isinstance(prompt, str):
            req.prompt = prompt
        else:
            try:
                req.prompt_token_ids.extend(prompt)
            except (TypeError, ValueError):
                _refuse(f"prompt[{i}]" if len(prompts) > 1 else "prompt", "token ids must be 32-bit integers")
        requests.append(req)
    return requests


def merged_completions(
    replies: list[inference_pb2.GenerateResponse], n: int, request_id: str
) -> inference_pb2.GenerateResponse:
    """One ``GenerateResponse`` for the replies to a batch of prompts, as vLLM's completions
    server builds it: prompt ``p``'s output ``i`` becomes index ``p * n + i``; usage summed."""
    merged = inference_pb2.GenerateResponse(request_id=request_id)
    for p, reply in enumerate(replies):
        for output in reply.outputs:
            added = merged.outputs.add()
            added.CopyFrom(output)
            added.index = p * n + output.index
        add_usage(merged.usage, reply.usage)
    return merged


def add_usage(total: common_pb2.Usage, part: common_pb2.Usage) -> None:
    """Add ``part``'s token counts to ``total``."""
    total.prompt_tokens += part.prompt_tokens
    total.completion_tokens += part.completion_tokens
    total.cached_tokens += part.cached_tokens


def _content(message_index: int, content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for j, part in enumerate(content):
        if part.type != "text" or part.text is None:
            _refuse(f"messages[{message_index}].content[{j}]", "only text content parts are supported")
        parts.append(part.text)
    return "".join(parts)


def _message(index: int, message: ChatMessage) -> common_pb2.ChatMessage:
    """One chat message as the contract's, following OpenAI's message rules: ``content`` is
    required except on an assistant message carrying ``tool_calls``; a ``tool`` message
    carries the ``tool_call_id`` it answers; the legacy ``function_call`` and ``function``
    role are refused (use tools); a ``developer`` message is OpenAI's newer name for a
    ``system`` message and is passed on as one."""
    where = f"messages[{index}]"
    if message.function_call is not None:
        _refuse(f"{where}.function_call", "legacy function calling is not supported; use tools")
    if message.role == "function":
        _refuse(f"{where}.role", "function messages are not supported (legacy function calling); use tool")
    if message.content is None and not (message.role == "assistant" and message.tool_calls):
        _refuse(f"{where}.content", f"is required in a {message.role} message")
    role = "system" if message.role == "developer" else message.role
    out = common_pb2.ChatMessage(role=role, content=_content(index, message.content))
    if message.name:
        out.name = message.name
    for call in message.tool_calls or ():
        out.tool_calls.add(id=call.id, name=call.function.name, arguments=call.function.arguments)
    if message.tool_call_id is not None:
        out.tool_call_id = message.tool_call_id
    return out


def _tools(body: ChatBody, req: inference_pb2.ChatRequest) -> None:
    """Copy ``tools``, ``tool_choice`` and ``parallel_tool_calls`` into the contract's
    request; an empty ``tools`` array is refused, as OpenAI's API and vLLM refuse it."""
    if body.tools is not None and not body.tools:
        _refuse("tools", "must not be an empty array; give at least one tool or leave it out")
    for tool in body.tools or ():
        function = tool.function
        parameters = "" if function.parameters is None else json.dumps(function.parameters, ensure_ascii=False)
        req.tools.add(name=function.name, description=function.description or "", parameters_json=parameters)
    choice = tool_choice_of(body)
    if choice is not None and choice[1] is None:
        req.tool_choice.mode = _TOOL_MODES[choice[0]]
    elif choice is not None:
        req.tool_choice.function_name = choice[1] or ""
    if body.parallel_tool_calls is not None:
        req.parallel_tool_calls = body.parallel_tool_calls


def forced_tool(body: ChatBody) -> str | None:
    """``"required"``, the named function, or None: the ``tool_choice`` that structured
    output forces (the reply's text is then the tool calls' JSON)."""
    if not body.tools:
        return None
    choice = tool_choice_of(body)
    if choice is None or choice[0] not in ("required", "function"):
        return None
    return choice[1] or "required"


_TOOL_CHOICE_RULE = 'must be "none", "auto", "required" or {"type": "function", "function": {"name": "..."}}'
_JSON_TYPES = {bool: "a boolean", int: "a number", float: "a number", list: "an array", str: "a string"}


def tool_choice_of(body: ChatBody) -> tuple[str, str | None] | None:
    """The request's ``tool_choice`` as OpenAI's chat API defines it: ``(mode, None)`` for
    ``"none"``, ``"auto"`` or ``"required"``, ``("function", name)`` for a named function,
    None when absent.

    Raises:
        RpcError: INVALID_ARGUMENT naming ``tool_choice`` for another JSON type, another
            string, an object whose ``type`` is not ``"function"``, without a non-empty
            string ``function.name``, or with other members.
    """
    choice = body.tool_choice
    if choice is None:
        return None
    if isinstance(choice, str):
        if choice not in _TOOL_MODES:
            _refuse("tool_choice", f"{_TOOL_CHOICE_RULE}; got the string {choice[:32]!r}")
        return choice, None
    if not isinstance(choice, dict):
        _refuse("tool_choice", f"{_TOOL_CHOICE_RULE}; got {_JSON_TYPES.get(type(choice), 'another type')}")
    extra = sorted(set(choice) - {"type", "function"})
    if extra:
        _refuse("tool_choice", f"{_TOOL_CHOICE_RULE}; {str(extra[0])[:32]!r} is not one of its members")
    if choice.get("type") != "function":
        _refuse("tool_choice", f'{_TOOL_CHOICE_RULE}; an object needs "type": "function"')
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        _refuse("tool_choice", f"{_TOOL_CHOICE_RULE}; an object needs function.name, the name of one of tools")
    if isinstance(function, dict) and set(function) - {"name"}:
        _refuse("tool_choice", f"{_TOOL_CHOICE_RULE}; function takes only a name")
    return "function", name


def chat_request(body: ChatBody, request_id: str) -> inference_pb2.ChatRequest:
    """A ``ChatRequest`` for ``POST /v1/chat/completions``.

    Raises:
        RpcError: INVALID_ARGUMENT for legacy ``functions``, ``echo``, audio, ``top_logprobs`` without
            ``logprobs``, a message without ``content`` (``messages[i].content``), an
            empty ``tools`` array, more than one structured-output field
            (``response_format`` counting as one), and vLLM's removed ``guided_*`` fields.
    """
    if body.functions:
        _refuse("functions", "legacy function calling is not supported; use tools")
    if body.echo:
        _refuse("echo", "is not supported")
    if body.audio is not None:
        _refuse("audio", "audio output is not supported")
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    sp = _sampling(body, max_tokens)
    if body.logprobs:
        _assign(sp, "logprobs", body.top_logprobs or 0, field="top_logprobs")
    elif body.top_logprobs is not None:
        _refuse("top_logprobs", "needs logprobs: true")
    found = _structured_sources(body)
    fmt = body.response_format
    if fmt is not None and fmt.type == "json_object":
        found.append(("response_format", "json_object", True))
    elif fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None or fmt.json_schema.schema_ is None:
            _refuse("response_format", "json_schema.schema is required")
        else:
            found.append(("response_format", "json_schema", fmt.json_schema.schema_))
    _apply_structured(sp, found)
    messages = [_message(i, m) for i, m in enumerate(body.messages)]
    req = inference_pb2.ChatRequest(model=body.model, messages=messages, sampling_params=sp, request_id=request_id)
    _tools(body, req)
    return req


def embed_request(body: EmbeddingBody, request_id: str) -> inference_pb2.EmbedRequest:
    """An ``EmbedRequest`` for ``POST /v1/embeddings``: its text inputs (none when ``input``
    is token ids: ``embed_token_inputs``)."""
    inputs = [body.input] if isinstance(body.input, str) else body.input
    texts = [x for x in inputs if isinstance(x, str)]
    return inference_pb2.EmbedRequest(model=body.model, inputs=texts, request_id=request_id)


def embed_token_inputs(body: EmbeddingBody) -> list[list[int]] | None:
    """The token-id inputs of an embeddings body (OpenAI's ``input`` as one token-id list or
    a list of them, which LangChain's ``OpenAIEmbeddings`` sends), else None."""
    value = body.input
    if isinstance(value, str) or not value or isinstance(value[0], str):
        return None
    if isinstance(value[0], int):
        return [value]  # type: ignore[list-item]
    return value  # type: ignore[return-value]


# -- replies ------------------------------------------------------------------------------


def usage(u: common_pb2.Usage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }
    if u.cached_tokens:
        out["prompt_tokens_details"] = {"cached_tokens": u.cached_tokens}
    return out


def finish_reason(value: int) -> str | None:
    return _FINISH.get(value)


def _sampled(position: common_pb2.PositionLogprobs, token_id: int) -> common_pb2.TokenLogprob | None:
    for c in position.candidates:
        if c.token_id == token_id:
            return c
    return None


def _top(position: common_pb2.PositionLogprobs, n: int) -> list[common_pb2.TokenLogprob]:
    """The ``n`` most likely candidates (vLLM adds the sampled token when it ranks lower)."""
    return sorted(position.candidates, key=lambda c: c.rank)[:n]


def completion_logprobs(token_ids, positions, top_n: int, offset: int = 0) -> dict[str, Any] | None:
    """OpenAI's completions ``logprobs`` object (tokens, token_logprobs, top_logprobs, text_offset)."""
    if not positions:
        return None
    tokens, lps, tops, offsets = [], [], [], []
    at = offset
    for tid, pos in zip(token_ids, positions, strict=False):
        chosen = _sampled(pos, tid)
        text = chosen.decoded_token if chosen else ""
        tokens.append(text)
        lps.append(chosen.logprob if chosen else None)
        tops.append({c.decoded_token: c.logprob for c in _top(pos, top_n)})
        offsets.append(at)
        at += len(text)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def chat_logprobs(token_ids, positions, top_n: int) -> dict[str, Any] | None:
    """OpenAI's chat ``logprobs`` object: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""
    if not positions:
        return None
    content = []
    for tid, pos in zip(token_ids, positions, strict=False):
        chosen = _sampled(pos, tid)
        text = chosen.decoded_token if chosen else ""
        content.append(
            {
                "token": text,
                "logprob": chosen.logprob if chosen else -9999.0,
                "bytes": list(text.encode("utf-8")),
                "top_logprobs": [
                    {"token": c.decoded_token, "logprob": c.logprob, "bytes": list(c.decoded_token.encode("utf-8"))}
                    for c in _top(pos, top_n)
                ],
            }
        )
    return {"content": content}


def completion_response(reply: inference_pb2.GenerateResponse, model: str, top_n: int) -> dict[str, Any]:
    return {
        "id": f"cmpl-{reply.request_id}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": o.index,
                "text": o.text,
                "logprobs": completion_logprobs(o.token_ids, o.logprobs, top_n),
                "finish_reason": finish_reason(o.finish_reason),
            }
            for o in reply.outputs
        ],
        "usage": usage(reply.usage),
    }


def _openai_calls(calls) -> list[dict[str, Any]]:
    """The contract's ``ToolCall`` messages as OpenAI ``tool_calls`` (arguments: JSON text)."""
    return [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call in calls
    ]


def _tool_finish(forced: str, reason: str | None) -> str | None:
    """vLLM's and OpenAI's finish reason for forced tool calls: ``tool_calls`` for
    ``required`` (when the model stopped), ``stop`` for a named function."""
    return "tool_calls" if forced == "required" and reason == "stop" else reason


def chat_response(
    reply: inference_pb2.ChatResponse,
    model: str,
    top_n: int,
    forced: str | None = None,
    contents: dict[int, str | None] | None = None,
) -> dict[str, Any]:
    """OpenAI's ``chat.completion``. An output with ``tool_calls`` (read by the operation:
    forced by ``forced``, see ``forced_tool``, or read by the model's tool-call parser for
    ``tool_choice: "auto"``) becomes an assistant message with those ``tool_calls`` and the
    content ``contents[index]`` (``null`` for a forced call; what the parser left of the
    text for ``auto``), ``finish_reason`` ``tool_calls`` as vLLM answers (a named function:
    ``stop``); an output without them is its text."""
    choices = []
    for o in reply.outputs:
        message: dict[str, Any] = {"role": "assistant", "content": o.text}
        reason = finish_reason(o.finish_reason)
        if o.tool_calls and forced is not None:
            message = {"role": "assistant", "content": None, "tool_calls": _openai_calls(o.tool_calls)}
            reason = _tool_finish(forced, reason)
        elif o.tool_calls:
            content = (contents or {}).get(o.index)
            message = {"role": "assistant", "content": content, "tool_calls": _openai_calls(o.tool_calls)}
            reason = "tool_calls"
        choices.append(
            {
                "index": o.index,
                "message": message,
                "logprobs": chat_logprobs(o.token_ids, o.logprobs, top_n),
                "finish_reason": reason,
            }
        )
    return {
        "id": f"chatcmpl-{reply.request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage(reply.usage),
    }


def embedding_response(reply: inference_pb2.EmbedResponse, model: str, encoding: str) -> dict[str, Any]:
    def encode(values) -> list[float] | str:
        if encoding == "base64":  # little-endian float32, as OpenAI's API sends it
            return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")
        return list(values)

    return {
        "object": "list",
        "data": [{"object": "embedding", "index": e.index, "embedding": encode(e.values)} for e in reply.embeddings],
        "model": model,
        "usage": {"prompt_tokens": reply.usage.prompt_tokens, "total_tokens": reply.usage.prompt_tokens},
    }


class StreamChunks:
    """Turns ``GenerateStreamResponse``/``ChatStreamResponse`` messages into OpenAI stream
    chunks (``text_completion`` / ``chat.completion.chunk``), plus the usage chunk when
    ``stream_options.include_usage`` is set."""

    def __init__(
        self,
        *,
        chat: bool,
        model: str,
        request_id: str,
        include_usage: bool,
        top_n: int,
        forced: str | None = None,
    ) -> None:
        self.chat = chat
        self.forced = forced
        self._tool_text: dict[int, list[str]] = {}
        self.model = model
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{request_id}"
        self.created = int(time.time())
        self.include_usage = include_usage
        self.top_n = top_n
        self._started: set[int] = set()

    def _chunk(self, choices: list[dict[str, Any]], usage_obj: dict[str, Any] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if self.include_usage:
            out["usage"] = usage_obj
        return out

    def _tool_chunks(self, msg) -> list[dict[str, Any]]:
        """Forced tool calls, streamed as OpenAI streams them once the index's JSON is
        complete: per call a delta with ``index``, ``id``, ``type`` and ``function.name``
        (``arguments`` empty), then one with the ``arguments``; then the finish reason in an
        empty delta. Text that is not the forced JSON (cut by ``max_tokens``) is sent as
        content."""
        parts = self._tool_text.setdefault(msg.index, [])
        if msg.text:
            parts.append(msg.text)
        if not msg.finish_reason:
            return []
        assert self.forced is not None
        text = "".join(parts)
        reason = finish_reason(msg.finish_reason)
        calls = _openai_calls(msg.tool_calls)
        started: dict[str, Any] = {"role": "assistant"}
        if not calls:
            return [
                self._chunk(
                    [
                        {
                            "index": msg.index,
                            "delta": {**started, "content": text},
                            "logprobs": None,
                            "finish_reason": reason,
                        }
                    ]
                )
            ]
        out = []
        for k, call in enumerate(calls):
            function = call["function"]
            head = {
                "index": k,
                "id": call["id"],
                "type": "function",
                "function": {"name": function["name"], "arguments": ""},
            }
            first = {**started, "content": None} if k == 0 else {}
            out.append(
                self._chunk(
                    [
                        {
                            "index": msg.index,
                            "delta": {**first, "tool_calls": [head]},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ]
                )
            )
            args = {"index": k, "function": {"arguments": function["arguments"]}}
            out.append(
                self._chunk(
                    [{"index": msg.index, "delta": {"tool_calls": [args]}, "logprobs": None, "finish_reason": None}]
                )
            )
        out.append(
            self._chunk(
                [
                    {
                        "index": msg.index,
                        "delta": {},
                        "logprobs": None,
                        "finish_reason": _tool_finish(self.forced, reason),
                    }
                ]
            )
        )
        return out

    def _auto_chunks(self, msg, reading: ToolDelta) -> list[dict[str, Any]]:
        """``tool_choice: "auto"``: the tool-call parser's reading of each message (vLLM's
        ``extract_tool_calls_streaming``, run by the operation), content and tool-call
        deltas as it returns them; the last call's arguments it held back are sent before
        the finish reason, which is ``tool_calls`` when the reply called a tool."""
        delta: dict[str, Any] = {"role": "assistant"} if reading.first else {}
        if reading.content:
            delta["content"] = reading.content
        if reading.calls:
            delta["tool_calls"] = reading.calls
        reason = finish_reason(msg.finish_reason)
        out = []
        if reason is not None and reading.called:
            if reading.rest is not None:
                if delta:
                    out.append(
                        self._chunk([{"index": msg.index, "delta": delta, "logprobs": None, "finish_reason": None}])
                    )
                delta = {"tool_calls": [reading.rest]}
            reason = "tool_calls" if reason == "stop" else reason
        if delta or reason is not None:
            out.append(self._chunk([{"index": msg.index, "delta": delta, "logprobs": None, "finish_reason": reason}]))
        return out

    def chunks(self, msg, reading: ToolDelta | None = None) -> list[dict[str, Any]]:
        """The chunks of one stream message; ``reading``: its ``ToolDelta`` for
        ``tool_choice: "auto"`` (``Inference.chat_stream_read``)."""
        out = []
        has_content = bool(msg.text or msg.token_ids or msg.finish_reason)
        if has_content and self.chat and self.forced is not None:
            out.extend(self._tool_chunks(msg))
        elif has_content and self.chat and reading is not None:
            out.extend(self._auto_chunks(msg, reading))
        elif has_content:
            reason = finish_reason(msg.finish_reason)
            if self.chat:
                delta: dict[str, Any] = {"content": msg.text} if msg.text or not reason else {}
                if msg.index not in self._started:
                    self._started.add(msg.index)
                    delta = {"role": "assistant", "content": msg.text}
                choice = {
                    "index": msg.index,
                    "delta": delta,
                    "logprobs": chat_logprobs(msg.token_ids, msg.logprobs, self.top_n),
                    "finish_reason": reason,
                }
            else:
                choice = {
                    "index": msg.index,
                    "text": msg.text,
                    "logprobs": completion_logprobs(msg.token_ids, msg.logprobs, self.top_n),
                    "finish_reason": reason,
                }
            out.append(self._chunk([choice]))
        if msg.HasField("usage") and self.include_usage:
            out.append(self._chunk([], usage(msg.usage)))
        return out


def tokenize_request(body: TokenizeBody) -> inference_pb2.TokenizeRequest:
    """vLLM's ``/tokenize`` body as the contract's ``TokenizeRequest``.

    Raises:
        RpcError: INVALID_ARGUMENT naming ``return_token_strs`` when it is true (one
            detokenization per token is not offered).
    """
    if body.return_token_strs:
        _refuse("return_token_strs", "is not supported; detokenize the ids with /detokenize")
    return inference_pb2.TokenizeRequest(model=body.model, text=body.prompt, add_special_tokens=body.add_special_tokens)


def tokenize_response(reply: inference_pb2.TokenizeResponse) -> dict[str, Any]:
    """vLLM's ``/tokenize`` reply: ``count``, ``max_model_len``, ``tokens``, ``token_strs``."""
    ids = list(reply.token_ids)
    return {"count": len(ids), "max_model_len": reply.max_model_len, "tokens": ids, "token_strs": None}


def detokenize_request(body: DetokenizeBody) -> inference_pb2.DetokenizeRequest:
    """vLLM's ``/detokenize`` body as the contract's ``DetokenizeRequest``.

    Raises:
        RpcError: INVALID_ARGUMENT naming ``tokens[i]`` for an id outside the contract's
            32-bit range (ids inside it but outside the vocabulary are refused by the engine).
    """
    for i, token in enumerate(body.tokens):
        if not -(2**31) <= token < 2**31:
            _refuse(f"tokens[{i}]", "token ids must be 32-bit integers")
    return inference_pb2.DetokenizeRequest(model=body.model, token_ids=body.tokens)
