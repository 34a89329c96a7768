"""OpenAI request bodies → the contract's request messages (OpenAI API reference: completions,
chat completions, embeddings; vLLM's ``/tokenize`` and ``/detokenize``).

The OpenAI front end runs the same operations as gRPC (``service.operations.inference``) on the
messages built here, so validation, limits and engine behaviour are the same. Field
violations come back with the contract's paths (``sampling_params.top_p``) and are renamed
to the OpenAI field (``top_p``) by ``openai_param``.

Structured output comes from one of: the contract-named fields ``json_schema``, ``regex``,
``choice``, ``grammar``, ``json_object``; vLLM's ``structured_outputs`` object; chat's
``response_format``. More than one is INVALID_ARGUMENT naming them all (over gRPC the
``structured_output`` oneof admits one). ``lora_name`` selects a LoRA adapter as over gRPC.
The replies go back to OpenAI's shapes in ``service.frontends.openai.reply_mapping``.
"""

from __future__ import annotations

import json
import re
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
from xinserve.v1 import common_pb2, inference_pb2, sampling_pb2
from xinserve_client.sampling_fields import REPEATED_SCALARS, STRUCTURED_OUTPUT

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


def tokenize_request(body: TokenizeBody) -> inference_pb2.TokenizeRequest:
    """vLLM's ``/tokenize`` body as the contract's ``TokenizeRequest``.

    Raises:
        RpcError: INVALID_ARGUMENT naming ``return_token_strs`` when it is true (one
            detokenization per token is not offered).
    """
    if body.return_token_strs:
        _refuse("return_token_strs", "is not supported; detokenize the ids with /detokenize")
    return inference_pb2.TokenizeRequest(model=body.model, text=body.prompt, add_special_tokens=body.add_special_tokens)


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
