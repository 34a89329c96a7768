"""Request bodies of the OpenAI-compatible API, as pydantic models (OpenAI's API reference:
``POST /v1/completions``, ``/v1/chat/completions``, ``/v1/embeddings``), and their parsing.

Fields OpenAI defines are typed here and validated in pydantic's strict mode, as OpenAI's
API checks them: a value of another JSON type is refused, never converted (``"n": "2"``,
``"stream": 1`` and ``"max_tokens": true`` are 400s), except that an integer is a number
(``"temperature": 1``) and ``null`` is accepted for every optional field. Other fields are
kept (``model_extra``). Those named like a ``xinserve.v1.SamplingParams`` field that OpenAI
does not define are vLLM's extra parameters, typed from the contract's descriptor, validated
as strictly, and applied by ``service.frontends.openai.request_mapping``:

- the optional and repeated scalars (``top_k``, ``min_p``, ``repetition_penalty``,
  ``stop_token_ids``, ...; ``SAMPLING_EXTRAS``);
- the ``structured_output`` members (``xinserve_client.sampling_fields.STRUCTURED_OUTPUT``): ``regex`` and ``grammar``
  (strings), ``json_schema`` (a JSON Schema as an object, or as JSON text), ``json_object``
  (a boolean) and ``choice`` (an array of strings); at most one of them, and none together
  with chat's ``response_format`` of type ``json_object``/``json_schema``;
- ``lora_name`` (a string; an adapter not configured for the model is a 404);
- vLLM's ``structured_outputs`` object (``StructuredOutputs``: ``json``, ``regex``,
  ``choice``, ``grammar``, ``json_object``), the same constraints under vLLM's names.

vLLM's removed ``guided_*`` fields and the ``structured_outputs`` options this server cannot
honour are refused, naming the field to use instead. Any other unknown field is ignored, as
vLLM's and OpenAI-compatible servers do. Fields this server cannot honour (legacy ``functions``, ``echo``,
``suffix``, ``best_of`` > 1, audio, ``prompt_logprobs`` and
``stream_options.continuous_usage_stats``) are refused by ``service.frontends.openai.request_mapping``, never silently
dropped. Every string of a body, typed field or not, must be valid Unicode (``lone_surrogate``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

from google.protobuf.descriptor import FieldDescriptor
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import ErrorDetails

from service.core.status import FieldViolation, invalid_argument
from xinserve.v1 import sampling_pb2
from xinserve_client.sampling_fields import OPTIONAL_SCALARS, REPEATED_SCALARS, STRUCTURED_OUTPUT

_SURROGATE = re.compile("[\ud800-\udfff]")
_KEY_CHARS = 64
_MAX_VIOLATIONS = 20


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
    model_config = ConfigDict(extra="allow", populate_by_name=True, strict=True)


class StreamOptions(_Body):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None


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


class FunctionCall(_Body):
    """A tool call's ``function``: the name and the arguments as JSON text."""

    name: str
    arguments: str


class ToolCall(_Body):
    """One entry of an assistant message's ``tool_calls``."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Body):
    """One message of ``messages``. Which roles need ``content`` (all but an assistant
    message carrying ``tool_calls`` or ``function_call``) is checked by
    ``service.frontends.openai.request_mapping.chat_request``."""

    role: Literal["developer", "system", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    function_call: Any = None


class FunctionDefinition(_Body):
    """A tool's ``function``: ``name``, ``description``, ``parameters`` (a JSON Schema)."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(_Body):
    """One entry of ``tools`` (OpenAI's chat API: only type ``function``)."""

    type: Literal["function"]
    function: FunctionDefinition


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
    tools: list[ChatTool] | None = None
    tool_choice: Any = None
    """``"none"``, ``"auto"``, ``"required"`` or ``{"type": "function", "function": {"name"}}``;
    checked by ``service.frontends.openai.request_mapping.tool_choice_of``, which names what is wrong."""
    parallel_tool_calls: bool | None = None
    functions: list[Any] | None = None
    audio: Any = None
    echo: bool | None = False


class EmbeddingBody(_Body):
    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] | None = "float"
    dimensions: int | None = None
    user: str | None = None


class TokenizeBody(_Body):
    """vLLM's ``POST /tokenize`` (completion form): ``prompt`` to token ids."""

    model: str
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool = False


class DetokenizeBody(_Body):
    """vLLM's ``POST /detokenize``: token ids to text."""

    model: str
    tokens: list[int]


# -- the contract's extra sampling fields -------------------------------------------------

_SCALAR_TYPES: dict[int, type] = {
    FieldDescriptor.TYPE_INT32: int,
    FieldDescriptor.TYPE_INT64: int,
    FieldDescriptor.TYPE_UINT32: int,
    FieldDescriptor.TYPE_UINT64: int,
    FieldDescriptor.TYPE_SINT32: int,
    FieldDescriptor.TYPE_SINT64: int,
    FieldDescriptor.TYPE_FLOAT: float,
    FieldDescriptor.TYPE_DOUBLE: float,
    FieldDescriptor.TYPE_BOOL: bool,
    FieldDescriptor.TYPE_STRING: str,
}
_OPENAI_TYPED = frozenset({*_Sampling.model_fields, *CompletionBody.model_fields, *ChatBody.model_fields})
SAMPLING_EXTRAS: tuple[str, ...] = tuple(
    name
    for name in (*OPTIONAL_SCALARS, *REPEATED_SCALARS)
    if name not in _OPENAI_TYPED and sampling_pb2.SamplingParams.DESCRIPTOR.fields_by_name[name].type in _SCALAR_TYPES
)
"""``SamplingParams`` fields accepted as extra request fields by their contract name (vLLM's
extra sampling parameters: ``top_k``, ``min_p``, ``repetition_penalty``, ``stop_token_ids``,
...): those OpenAI does not define itself."""


def _extra_type(name: str) -> Any:
    field = sampling_pb2.SamplingParams.DESCRIPTOR.fields_by_name[name]
    scalar = _SCALAR_TYPES[field.type]
    return (list[scalar] if field.is_repeated else scalar) | None  # type: ignore[valid-type]


def _structured_type(name: str) -> Any:
    """The JSON type of a ``structured_output`` member: its scalar's, an array of strings
    for ``choice`` (a ``ChoiceList``), and an object or a string for ``json_schema`` (vLLM
    takes a schema as either; the contract holds its JSON text)."""
    field = sampling_pb2.SamplingParams.DESCRIPTOR.fields_by_name[name]
    if name == "json_schema":
        return dict[str, Any] | str | None
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return list[str] | None
    return _SCALAR_TYPES[field.type] | None


class StructuredOutputs(_Body):
    """vLLM's ``structured_outputs`` request object (``vllm.sampling_params.
    StructuredOutputsParams``): exactly one constraint, ``json`` (a JSON Schema, object or
    JSON text), ``regex``, ``choice`` (array of strings), ``grammar`` or ``json_object``.
    Its other keys (``disable_any_whitespace``, ``structural_tag``, ...) are kept and
    refused by ``service.frontends.openai.request_mapping``."""

    json_: dict[str, Any] | str | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None


_EXTRA_FIELDS: dict[str, Any] = {
    **{name: (_extra_type(name), None) for name in SAMPLING_EXTRAS},
    **{name: (_structured_type(name), None) for name in STRUCTURED_OUTPUT},
    "lora_name": (str | None, None),
    "structured_outputs": (StructuredOutputs | None, None),
}
SamplingExtras: type[BaseModel] = create_model(
    "SamplingExtras", __config__=ConfigDict(extra="ignore", strict=True), **_EXTRA_FIELDS
)
"""The contract-named extra fields of a request body (``SAMPLING_EXTRAS``,
``xinserve_client.sampling_fields.STRUCTURED_OUTPUT``, ``lora_name``) and ``structured_outputs``, typed as the contract
declares them (an ``int32`` is an integer, a ``float`` a number, a ``repeated int32`` an
array of integers, ``choice`` an array of strings)."""


# -- parsing ------------------------------------------------------------------------------

_B = TypeVar("_B", bound=_Body)

# pydantic error type → the JSON type the field expects, as OpenAI's errors word it.
_EXPECTED = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "string_type": "a string",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}
# union member label (pydantic's loc entry for it) → (JSON type, with article, plural)
_LABELS = {
    "str": ("string", "a string", "strings"),
    "int": ("integer", "an integer", "integers"),
    "float": ("number", "a number", "numbers"),
    "bool": ("boolean", "a boolean", "booleans"),
}


def json_type(value: Any) -> str:
    """The JSON type of a parsed JSON value: ``null``, ``boolean``, ``integer``, ``number``,
    ``string``, ``array`` or ``object``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _with_article(kind: str) -> str:
    return "null" if kind == "null" else ("an " if kind[0] in "aeiou" else "a ") + kind


def _label_kind(label: str) -> str:
    if label in _LABELS:
        return _LABELS[label][0]
    return "array" if label.startswith("list[") else "object"


def _describe(label: str, plural: bool = False) -> str:
    if label in _LABELS:
        return _LABELS[label][2 if plural else 1]
    if label.startswith("list[") and label.endswith("]"):
        return ("arrays of " if plural else "an array of ") + _describe(label[5:-1], True)
    return "objects" if plural else "an object"


def _one_of(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _walk(path: str, value: Any, loc: Sequence[int | str], missing: bool) -> tuple[str, Any, tuple[int | str, ...]]:
    """Follow ``loc`` through the request's own JSON from ``value`` (at ``path``); returns
    where it stops, the value there, and what is left of ``loc`` (a union member label)."""
    for i, part in enumerate(loc):
        if isinstance(value, dict) and isinstance(part, str) and (part in value or (missing and i == len(loc) - 1)):
            key = part[:_KEY_CHARS]
            path, value = (f"{path}.{key}" if path else key), value.get(part)
        elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
            path, value = f"{path}[{part}]", value[part]
        else:
            return path, value, tuple(loc[i:])
    return path, value, ()


def _explain(error: ErrorDetails, value: Any) -> str:
    expected = _EXPECTED.get(error["type"])
    if expected == "a number" and json_type(value) == "integer":  # an integer no float can hold
        return "is out of range for a number"
    if expected is not None:
        return f"expected {expected}, but got {_with_article(json_type(value))} instead"
    if error["type"] == "missing":
        return "is required"
    return error["msg"]


_Located = tuple[tuple[int | str, ...], ErrorDetails]


def _fits(label: str, kind: str) -> bool:
    """A union member labelled ``label`` takes a value of JSON type ``kind`` (an integer is a number)."""
    expected = _label_kind(label)
    return expected == kind or (expected, kind) == ("number", "integer")


def _closest_arrays(labels: Sequence[str], found: list[Any], members: Sequence[_Located]) -> list[str]:
    """The array members of a union that ``found`` (a non-empty array) fits most nearly: those
    with the fewest element errors, then those whose element type is the first element's (a
    batch ``["a", 5]`` is an array of strings with a bad element, not an array of integers)."""
    counts = {label: sum(1 for rest, _ in members if rest[0] == label) for label in labels}
    fewest = min(counts.values())
    closest = [label for label in labels if counts[label] == fewest]
    if len(closest) > 1:
        first = json_type(found[0])
        by_first = [label for label in closest if label.startswith("list[") and _fits(label[5:-1], first)]
        closest = by_first or closest
    return closest


def _violations(path: str, value: Any, errors: Sequence[_Located]) -> list[FieldViolation]:
    """Field violations (OpenAI request paths) for pydantic ``errors`` located below
    ``value`` (at ``path``). A value that fits no member of a union is named once, with
    the types the field accepts; if exactly one member has the value's JSON type (for an
    array, the one it fits most nearly: ``_closest_arrays``), that member's own errors are
    reported instead (``prompt[1]``)."""
    out: list[FieldViolation] = []
    unions: dict[str, tuple[Any, list[_Located]]] = {}
    for loc, error in errors:
        at, found, rest = _walk(path, value, loc, error["type"] == "missing")
        if rest and isinstance(rest[0], str):
            unions.setdefault(at, (found, []))[1].append((rest, error))
        else:
            out.append(FieldViolation(at or "body", _explain(error, found)))
    for at, (found, members) in unions.items():
        labels = list(dict.fromkeys(str(rest[0]) for rest, _ in members))
        kind = json_type(found)
        fitting = [label for label in labels if _fits(label, kind)]
        if len(fitting) > 1 and isinstance(found, list) and found:
            fitting = _closest_arrays(fitting, found, members)
        if len(fitting) == 1:
            inner = [(rest[1:], error) for rest, error in members if rest[0] == fitting[0]]
            out.extend(_violations(at, found, inner))
            continue
        accepted = _one_of([_describe(label) for label in labels])
        got = "" if fitting else f", but got {_with_article(kind)} instead"
        out.append(FieldViolation(at or "body", f"expected {accepted}{got}"))
    return out


def parse_body(cls: type[_B], data: Any) -> _B:
    """Validate a parsed JSON request body as ``cls`` (strictly, as OpenAI does), including
    the contract-named extra fields of a completions or chat body (``SamplingExtras``).

    Raises:
        RpcError: INVALID_ARGUMENT naming each bad field by its JSON path in the request
            (``n``, ``messages[1].role``, ``stop_token_ids[0]``), with the JSON type it
            expects and the one it got (``expected an integer, but got a string instead``);
            ``body`` when the body is not a JSON object.
    """
    if not isinstance(data, dict):
        raise invalid_argument([FieldViolation("body", "must be a JSON object")])
    errors: list[ErrorDetails] = []
    body: _B | None = None
    try:
        body = cls.model_validate(data)
    except ValidationError as exc:
        errors.extend(exc.errors())
    if issubclass(cls, _Sampling):
        try:
            SamplingExtras.model_validate(data)
        except ValidationError as exc:
            errors.extend(exc.errors())
    if errors or body is None:
        violations = list(dict.fromkeys(_violations("", data, [(e["loc"], e) for e in errors])))
        raise invalid_argument(violations[:_MAX_VIOLATIONS])
    return body
