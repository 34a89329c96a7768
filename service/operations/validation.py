"""Validation of requests into the engine's neutral types.

Every field is checked and all violations are reported together (one INVALID_ARGUMENT
with a ``BadRequest`` listing each). Bounds follow vLLM's ``SamplingParams`` checks
(vllm/sampling_params.py ``_verify_args``) and xinserve's configured limits.
"""

from __future__ import annotations

import math
import re
import uuid

from engine_backends.protocol import ModelInfo, SamplingOptions, StructuredOutput
from service.core.status import FieldViolation, invalid_argument
from service.settings.config import LimitsSettings
from xinserve.v1 import sampling_pb2
from xinserve_client.sampling_fields import OPTIONAL_SCALARS

REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}\Z")
REQUEST_ID_RULE = "must be sent once, 1..128 printable ASCII characters without spaces"
"""A request id (use ``match``): 1..128 printable ASCII characters, no spaces, nothing after."""
_CHAT_ROLES = frozenset({"system", "user", "assistant", "tool"})
_INT64_MAX = 2**63 - 1


class Violations:
    """Collects field violations; ``raise_if_any`` raises one INVALID_ARGUMENT with all of them."""

    def __init__(self) -> None:
        self.items: list[FieldViolation] = []

    def add(self, field: str, description: str) -> None:
        self.items.append(FieldViolation(field, description))

    def raise_if_any(self) -> None:
        if self.items:
            raise invalid_argument(self.items)


def resolve_request_id(given: str, call_id: str | None, v: Violations) -> str:
    """The request's id: the ``request_id`` field if set, else the call's id (the
    ``x-request-id`` metadata, which the call pipeline has validated, or one it generated)."""
    if given:
        if REQUEST_ID.match(given):
            return given
        v.add("request_id", REQUEST_ID_RULE)
    return call_id or uuid.uuid4().hex


def check_model_name(name: str, v: Violations, field: str = "model") -> None:
    if not name:
        v.add(field, "is required")
    elif len(name) > 128:
        v.add(field, "is longer than 128 characters")


def _finite(
    v: Violations,
    field: str,
    value: float,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
) -> None:
    if not math.isfinite(value):
        v.add(field, "must be a finite number")
        return
    if lo is not None and (value < lo or (lo_open and value == lo)):
        v.add(field, f"must be {'>' if lo_open else '>='} {lo:g}, got {value:g}")
    if hi is not None and value > hi:
        v.add(field, f"must be <= {hi:g}, got {value:g}")


def sampling_options(
    sp: sampling_pb2.SamplingParams, info: ModelInfo, limits: LimitsSettings, v: Violations
) -> SamplingOptions:
    """Check ``sp`` against vLLM's bounds, the model and the limits; return engine options.

    Violations are added to ``v`` with paths ``sampling_params.<field>``; the returned
    options are only meaningful when ``v`` stays empty.
    """
    p = "sampling_params."

    def opt(name: str):  # the value when present, else None (absent = model default)
        return getattr(sp, name) if sp.HasField(name) else None

    n = opt("n")
    if n is not None and not 1 <= n <= limits.max_n:
        v.add(p + "n", f"must be between 1 and {limits.max_n}, got {n}")
    max_tokens = opt("max_tokens")
    if max_tokens is not None and max_tokens < 1:
        v.add(p + "max_tokens", f"must be >= 1, got {max_tokens}")
    min_tokens = opt("min_tokens")
    if min_tokens is not None:
        if min_tokens < 0:
            v.add(p + "min_tokens", f"must be >= 0, got {min_tokens}")
        elif max_tokens is not None and min_tokens > max_tokens:
            v.add(p + "min_tokens", f"must be <= max_tokens ({max_tokens}), got {min_tokens}")
    temperature = opt("temperature")
    if temperature is not None:
        _finite(v, p + "temperature", temperature, lo=0.0, hi=2.0)
        if n is not None and n > 1 and temperature == 0.0:
            v.add(p + "n", "must be 1 with temperature 0 (greedy sampling has one result)")
    top_p = opt("top_p")
    if top_p is not None:
        _finite(v, p + "top_p", top_p, lo=0.0, hi=1.0, lo_open=True)
    top_k = opt("top_k")
    if top_k is not None and top_k < -1:
        v.add(p + "top_k", f"must be -1, 0 (disabled) or >= 1, got {top_k}")
    min_p = opt("min_p")
    if min_p is not None:
        _finite(v, p + "min_p", min_p, lo=0.0, hi=1.0)
    for name in ("presence_penalty", "frequency_penalty"):
        value = opt(name)
        if value is not None:
            _finite(v, p + name, value, lo=-2.0, hi=2.0)
    repetition_penalty = opt("repetition_penalty")
    if repetition_penalty is not None:
        _finite(v, p + "repetition_penalty", repetition_penalty, lo=0.0, lo_open=True)
    seed = opt("seed")
    if seed is not None and not 0 <= seed <= _INT64_MAX:
        v.add(p + "seed", f"must be >= 0, got {seed}")

    if len(sp.stop) > limits.max_stop_sequences:
        v.add(p + "stop", f"at most {limits.max_stop_sequences} stop strings, got {len(sp.stop)}")
    else:
        for i, s in enumerate(sp.stop):
            size = len(s.encode("utf-8"))
            if size == 0 or size > limits.max_stop_sequence_bytes:
                v.add(f"{p}stop[{i}]", f"must be 1..{limits.max_stop_sequence_bytes} bytes, got {size}")
    vocab = info.vocab_size
    if len(sp.stop_token_ids) > limits.max_stop_sequences:
        v.add(p + "stop_token_ids", f"at most {limits.max_stop_sequences} ids, got {len(sp.stop_token_ids)}")
    else:
        for i, tid in enumerate(sp.stop_token_ids):
            if not 0 <= tid < vocab:
                v.add(f"{p}stop_token_ids[{i}]", f"token id {tid} is outside the vocabulary [0, {vocab})")
    for name in ("logprobs", "prompt_logprobs"):
        value = opt(name)
        if value is not None and not 0 <= value <= info.max_logprobs:
            v.add(p + name, f"must be between 0 and {info.max_logprobs}, got {value}")
    _check_logprob_budget(sp, info, limits, v)
    if len(sp.logit_bias) > min(vocab, limits.max_logit_bias):
        v.add(
            p + "logit_bias",
            f"at most {min(vocab, limits.max_logit_bias)} entries are accepted (limits.max_logit_bias, "
            f"vocabulary size {vocab}), got {len(sp.logit_bias)}",
        )
    else:
        for tid, bias in sp.logit_bias.items():
            if not 0 <= tid < vocab:
                v.add(f"{p}logit_bias[{tid}]", f"token id outside the vocabulary [0, {vocab})")
            else:
                _finite(v, f"{p}logit_bias[{tid}]", bias, lo=-100.0, hi=100.0)

    structured: StructuredOutput | None = None
    kind = sp.WhichOneof("structured_output")
    if kind == "choice":
        choices = tuple(sp.choice.choices)
        field = p + "choice.choices"
        if not choices or any(not c for c in choices):
            v.add(field, "needs at least one choice, none empty")
        elif len(choices) > limits.max_structured_choices:
            v.add(
                field,
                f"at most {limits.max_structured_choices} choices are accepted "
                f"(limits.max_structured_choices), got {len(choices)}",
            )
        else:
            _check_constraint_size(v, field, sum(len(c.encode("utf-8")) for c in choices), limits)
        structured = StructuredOutput("choice", choices)
    elif kind == "json_object":
        if not sp.json_object:
            v.add(p + "json_object", "only true is meaningful; leave it unset instead")
        structured = StructuredOutput("json_object", True)
    elif kind is not None:
        text = getattr(sp, kind)
        if not text:
            v.add(p + kind, "must not be empty")
        else:
            check_constraint(v, p + kind, text, kind, limits)
        structured = StructuredOutput(kind, text)  # type: ignore[arg-type]
    if sp.lora_name and len(sp.lora_name) > 128:
        v.add(p + "lora_name", "is longer than 128 characters")

    return SamplingOptions(
        **{name: opt(name) for name in OPTIONAL_SCALARS},
        stop=tuple(sp.stop),
        stop_token_ids=tuple(sp.stop_token_ids),
        logit_bias=dict(sp.logit_bias),
        structured_output=structured,
        lora_name=sp.lora_name or None,
    )


# Per constraint kind: the characters that open and close a nesting level, the quotes whose
# contents are literal, and whether ``[...]`` is a character class (literal contents).
_NESTING: dict[str, tuple[str, str, str, bool]] = {
    "json_schema": ("[{", "]}", '"', False),
    "regex": ("(", ")", "", True),
    "grammar": ("([{", ")]}", "\"'", False),
}


def nesting_depth(text: str, kind: str) -> int:
    """The deepest nesting of a structured-output constraint's text, in one pass over it:
    JSON arrays and objects (``json_schema``, outside strings), regex groups (``regex``,
    outside character classes), grammar groups ``( ) [ ] { }`` (``grammar``, outside quoted
    literals). A backslash escapes the next character. Unbalanced closers count as nothing;
    the compiler refuses such text itself."""
    opens, closes, quotes, char_class = _NESTING[kind]
    depth = deepest = 0
    quote = ""
    in_class = escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif quote:
            if ch == quote:
                quote = ""
        elif in_class:
            if ch == "]":
                in_class = False
        elif ch in quotes:
            quote = ch
        elif char_class and ch == "[":
            in_class = True
        elif ch in opens:
            depth += 1
            deepest = max(deepest, depth)
        elif ch in closes and depth:
            depth -= 1
    return deepest


def check_constraint(v: Violations, field: str, text: str, kind: str, limits: LimitsSettings) -> None:
    """Refuse a structured-output constraint (``kind``: ``json_schema``, ``regex`` or
    ``grammar``) of more than ``limits.max_structured_output_bytes`` UTF-8 bytes or nested
    deeper than ``limits.max_structured_output_depth`` (``nesting_depth``), naming ``field``."""
    if _check_constraint_size(v, field, len(text.encode("utf-8")), limits):
        depth = nesting_depth(text, kind)
        if depth > limits.max_structured_output_depth:
            v.add(
                field,
                f"nests {depth} levels deep; at most {limits.max_structured_output_depth} are accepted "
                "(limits.max_structured_output_depth)",
            )


def _check_constraint_size(v: Violations, field: str, size: int, limits: LimitsSettings) -> bool:
    """Refuse a constraint larger than ``limits.max_structured_output_bytes``; True when it fits."""
    if size <= limits.max_structured_output_bytes:
        return True
    v.add(
        field,
        f"is {size} bytes; at most {limits.max_structured_output_bytes} bytes are accepted "
        "(limits.max_structured_output_bytes)",
    )
    return False


def check_token_ids(v: Violations, field: str, count: int, limits: LimitsSettings) -> None:
    """Refuse a token-id list longer than ``limits.max_token_ids``."""
    if count > limits.max_token_ids:
        v.add(field, f"has {count} token ids; at most {limits.max_token_ids} are accepted (limits.max_token_ids)")


def logprob_entries(
    n: int, logprobs: int | None, prompt_logprobs: int | None, max_tokens: int | None, context: int
) -> int:
    """The most log-probability entries a generation request can produce (vLLM returns the
    sampled or prompt token plus the top ``logprobs``/``prompt_logprobs`` per position):
    ``n x (logprobs + 1) x max_tokens + (prompt_logprobs + 1) x longest prompt``. The longest
    prompt is ``context - max_tokens``; an unset ``max_tokens`` counts as ``context`` (the
    most any request can generate), and the prompt then as ``context`` too."""
    generated = max_tokens if max_tokens is not None else context
    prompt = context - max_tokens if max_tokens is not None else context
    total = 0
    if logprobs is not None:
        total += n * (logprobs + 1) * generated
    if prompt_logprobs is not None:
        total += (prompt_logprobs + 1) * max(prompt, 0)
    return total


def _check_logprob_budget(
    sp: sampling_pb2.SamplingParams, info: ModelInfo, limits: LimitsSettings, v: Violations
) -> None:
    """Refuse a request whose logprobs could exceed ``limits.max_logprob_entries`` (checked
    only when n, max_tokens and both logprobs fields are otherwise valid)."""
    guarded = {f"sampling_params.{f}" for f in ("n", "max_tokens", "logprobs", "prompt_logprobs")}
    if any(item.field in guarded for item in v.items):
        return
    logprobs = sp.logprobs if sp.HasField("logprobs") else None
    prompt_logprobs = sp.prompt_logprobs if sp.HasField("prompt_logprobs") else None
    if logprobs is None and prompt_logprobs is None:
        return
    n = sp.n if sp.HasField("n") else 1
    max_tokens = sp.max_tokens if sp.HasField("max_tokens") else None
    context = info.max_model_len
    total = logprob_entries(n, logprobs, prompt_logprobs, max_tokens, context)
    limit = limits.max_logprob_entries
    if total <= limit:
        return
    tokens = f"max_tokens {max_tokens}" if max_tokens is not None else f"max_tokens unset = context {context}"
    parts = []
    if logprobs is not None:
        parts.append(f"n {n} x (logprobs {logprobs} + 1) x {tokens}")
    if prompt_logprobs is not None:
        prompt = context - max_tokens if max_tokens is not None else context
        parts.append(f"(prompt_logprobs {prompt_logprobs} + 1) x {prompt} prompt tokens at most")
    field = "logprobs" if logprobs is not None else "prompt_logprobs"
    v.add(
        f"sampling_params.{field}",
        f"asks for up to {total} log-probability entries ({' + '.join(parts)}); at most {limit} per "
        "request are served (limits.max_logprob_entries): lower n, logprobs, prompt_logprobs or max_tokens",
    )


def check_chat_messages(messages, limits: LimitsSettings, v: Violations) -> list[dict[str, str]]:
    """Check role-tagged messages; returns them as the dicts chat templates take."""
    if not messages:
        v.add("messages", "at least one message is required")
        return []
    if len(messages) > limits.max_chat_messages:
        v.add("messages", f"at most {limits.max_chat_messages} messages, got {len(messages)}")
        return []
    out: list[dict[str, str]] = []
    for i, m in enumerate(messages):
        if m.role not in _CHAT_ROLES:
            v.add(f"messages[{i}].role", f"must be one of {', '.join(sorted(_CHAT_ROLES))}")
        entry = {"role": m.role, "content": m.content}
        if m.HasField("name"):
            entry["name"] = m.name
        out.append(entry)
    return out


def check_text_size(
    v: Violations,
    field: str,
    size: int,
    limits: LimitsSettings,
    limit: int | None = None,
    name: str = "max_prompt_bytes",
) -> None:
    """Refuse text larger than ``limit`` (default ``limits.max_prompt_bytes``; UTF-8 bytes)
    before tokenizing it; ``name`` is the limit's setting, given in the refusal."""
    limit = limits.max_prompt_bytes if limit is None else limit
    if size > limit:
        v.add(field, f"is {size} bytes; at most {limit} bytes are accepted (limits.{name})")
