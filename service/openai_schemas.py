"""Request bodies of the OpenAI-compatible API, as pydantic models (OpenAI's API reference:
``POST /v1/completions``, ``/v1/chat/completions``, ``/v1/embeddings``).

Fields OpenAI defines are typed here. Other fields are kept (``model_extra``): those named
like a ``xinserve.v1.SamplingParams`` field (vLLM's extra sampling parameters such as
``top_k``, ``min_p``, ``repetition_penalty``) are applied; any other unknown field is
ignored, as vLLM's and OpenAI-compatible servers do. Fields this server cannot honour
(tools, ``echo``, ``suffix``, ``best_of`` > 1, audio) are refused, never silently dropped.
Every string of a body, typed field or not, must be valid Unicode (``lone_surrogate``).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_SURROGATE = re.compile("[\ud800-\udfff]")
_KEY_CHARS = 64


def lone_surrogate(data: Any) -> tuple[str, str] | None:
    """The first string in parsed JSON ``data`` (values and object keys, in document order)
    holding a lone surrogate (U+D800..U+DFFF, which a ``\\uD800`` escape can produce; it is no
    Unicode scalar value and UTF-8 cannot encode it, RFC 8259 section 8.2), as
    ``(path, description)``; None when every string is valid.

    ``path`` is the field's JSON path in the form validation errors use
    (``messages[0].content``, ``stop[1]``); a bad object key names the object holding it
    (``"body"`` for the top level). Object keys in the path are cut to 64 characters.
    Iterative, so any depth ``json.loads`` accepted is walked without recursion.
    """
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return path or "body", "holds a lone surrogate (U+D800..U+DFFF), which is not valid Unicode"
        elif isinstance(value, dict):
            if any(_SURROGATE.search(key) for key in value):
                return path or "body", "has a key holding a lone surrogate (U+D800..U+DFFF), which is not valid Unicode"
            prefix = f"{path}." if path else ""
            stack.extend((f"{prefix}{key[:_KEY_CHARS]}", item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(value))))
    return None


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class StreamOptions(_Body):
    include_usage: bool | None = None


class _Sampling(_Body):
    model: str
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    max_tokens: int | None = None
    n: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    user: str | None = None


class CompletionBody(_Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = None
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = None


class ContentPart(_Body):
    type: str
    text: str | None = None


class ChatMessage(_Body):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None


class JsonSchemaFormat(_Body):
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class ChatBody(_Sampling):
    messages: list[ChatMessage]
    logprobs: bool | None = False
    top_logprobs: int | None = None
    max_completion_tokens: int | None = None
    response_format: ResponseFormat | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    audio: Any = None


class EmbeddingBody(_Body):
    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] | None = "float"
    dimensions: int | None = None
    user: str | None = None
