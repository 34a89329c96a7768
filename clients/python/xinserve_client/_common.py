"""What the sync and asyncio clients share: channel settings, credentials, request building."""

from __future__ import annotations

import enum
import json
import os
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import grpc

from xinserve.v1 import common_pb2, inference_pb2, sampling_pb2

from .addresses import is_loopback_target
from .errors import IncompatibleServerError, UnavailableError
from .sampling_fields import ALL_FIELDS, OPTIONAL_SCALARS, STRUCTURED_OUTPUT

__all__ = [
    "DEFAULT",
    "SAMPLING_PARAM_NAMES",
    "ChatMessageLike",
    "PemSource",
    "Prompt",
    "TokenSource",
    "ToolChoiceLike",
    "ToolLike",
    "build_sampling_params",
]

CLIENT_VERSION = "0.1.0"
SCHEMA_REVISION = 4
"""Revision of the xinserve.v1 contract this client was built against (GetServerInfo compares)."""
MiB = 1024 * 1024


class _Default(enum.Enum):
    """Sentinel type: "use the client's default" (distinct from None, which means no deadline)."""

    DEFAULT = "DEFAULT"

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = _Default.DEFAULT
"""Pass as ``timeout`` to use the client's default (this is the default of every call)."""

Timeout = Union[float, None, _Default]  # noqa: UP007 - a runtime alias
PemSource = Union[bytes, str, "os.PathLike[str]"]
TokenSource = Union[str, Callable[[], str]]  # noqa: UP007
Prompt = Union[str, Sequence[int]]  # noqa: UP007
ChatMessageLike = Union[common_pb2.ChatMessage, Mapping[str, Any], tuple[str, str]]  # noqa: UP007

SAMPLING_PARAM_NAMES: frozenset[str] = frozenset(ALL_FIELDS)
"""Keyword arguments accepted as sampling parameters by every generate/chat method."""


def build_sampling_params(
    base: sampling_pb2.SamplingParams | None = None, **kwargs: Any
) -> sampling_pb2.SamplingParams | None:
    """Build a ``xinserve.v1.SamplingParams`` from vLLM-named keyword arguments.

    A keyword set to None is left unset (the model's default); any other value is set
    explicitly, so ``temperature=0.0`` means greedy. ``stop`` takes a string or a list of
    strings; ``json_schema`` a JSON string or a dict (serialised); ``choice`` a list of strings;
    ``logit_bias`` a ``{token_id: bias}`` mapping. Values are validated by the server.

    Args:
        base: an existing message to start from (copied, never modified).
        **kwargs: names from :data:`SAMPLING_PARAM_NAMES`.

    Returns:
        The message, or None when neither ``base`` nor any non-None keyword was given.

    Raises:
        TypeError: an unknown keyword, or a value of the wrong type.
        ValueError: more than one structured-output keyword.
    """
    unknown = sorted(set(kwargs) - SAMPLING_PARAM_NAMES)
    if unknown:
        raise TypeError(f"unknown sampling parameter(s): {', '.join(unknown)}")
    given = {k: v for k, v in kwargs.items() if v is not None}
    if base is None and not given:
        return None
    params = sampling_pb2.SamplingParams()
    if base is not None:
        params.CopyFrom(base)
    for name in OPTIONAL_SCALARS:
        if name in given:
            setattr(params, name, given[name])
    if "stop" in given:
        stop = given["stop"]
        del params.stop[:]
        params.stop.extend([stop] if isinstance(stop, str) else list(stop))
    if "stop_token_ids" in given:
        del params.stop_token_ids[:]
        params.stop_token_ids.extend(int(t) for t in given["stop_token_ids"])
    if "logit_bias" in given:
        params.logit_bias.clear()
        for token_id, bias in dict(given["logit_bias"]).items():
            params.logit_bias[int(token_id)] = float(bias)
    if "lora_name" in given:
        params.lora_name = given["lora_name"]
    structured = [name for name in STRUCTURED_OUTPUT if name in given]
    if len(structured) > 1:
        raise ValueError(f"at most one structured-output parameter may be given, got {', '.join(structured)}")
    if structured:
        name = structured[0]
        value = given[name]
        if name == "json_schema":
            params.json_schema = value if isinstance(value, str) else json.dumps(value)
        elif name == "choice":
            if isinstance(value, str):
                raise TypeError("choice takes a list of strings")
            params.choice.CopyFrom(sampling_pb2.ChoiceList(choices=list(value)))
        else:
            setattr(params, name, value)
    return params


def set_prompt(request: inference_pb2.GenerateRequest, prompt: Prompt) -> None:
    """Set the text or token-id prompt of a GenerateRequest."""
    if isinstance(prompt, str):
        request.prompt = prompt
    elif isinstance(prompt, (bytes, bytearray)):
        raise TypeError("prompt must be a str or a sequence of token ids, not bytes")
    else:
        request.prompt_token_ids.extend(int(t) for t in prompt)


def chat_messages(messages: Sequence[ChatMessageLike]) -> list[common_pb2.ChatMessage]:
    """Turn ChatMessage protos, ``{"role", "content"[, "name"]}`` dicts or (role, content)
    tuples into ChatMessage protos."""
    out: list[common_pb2.ChatMessage] = []
    for message in messages:
        if isinstance(message, common_pb2.ChatMessage):
            out.append(message)
        elif isinstance(message, Mapping):
            out.append(common_pb2.ChatMessage(**dict(message)))
        elif isinstance(message, tuple) and len(message) == 2:
            out.append(common_pb2.ChatMessage(role=message[0], content=message[1]))
        else:
            raise TypeError(f"chat message must be a ChatMessage, dict or (role, content), got {message!r}")
    return out


ToolLike = Union[common_pb2.Tool, Mapping[str, Any]]  # noqa: UP007
"""A ``Tool`` proto, or an OpenAI chat ``tools`` entry: ``{"type": "function", "function":
{"name", "description", "parameters"}}`` (``parameters`` a JSON Schema object)."""
ToolChoiceLike = Union[str, inference_pb2.ToolChoice, Mapping[str, Any]]  # noqa: UP007
"""``"none"``, ``"auto"``, ``"required"``, a ``ToolChoice`` proto, or OpenAI's named choice
``{"type": "function", "function": {"name": ...}}``."""
_TOOL_MODES = {
    "none": inference_pb2.TOOL_CHOICE_MODE_NONE,
    "auto": inference_pb2.TOOL_CHOICE_MODE_AUTO,
    "required": inference_pb2.TOOL_CHOICE_MODE_REQUIRED,
}


def tool_protos(tools: Sequence[ToolLike]) -> list[common_pb2.Tool]:
    """``Tool`` protos from protos or OpenAI ``tools`` dicts (``parameters`` serialised to
    ``parameters_json``).

    Raises:
        TypeError: an entry that is neither, or an OpenAI entry not of type ``function``.
    """
    out: list[common_pb2.Tool] = []
    for tool in tools:
        if isinstance(tool, common_pb2.Tool):
            out.append(tool)
            continue
        if (
            not isinstance(tool, Mapping)
            or tool.get("type") != "function"
            or not isinstance(tool.get("function"), Mapping)
        ):
            raise TypeError(f'a tool must be a Tool or {{"type": "function", "function": {{...}}}}, got {tool!r}')
        function = tool["function"]
        parameters = function.get("parameters")
        out.append(
            common_pb2.Tool(
                name=function.get("name", ""),
                description=function.get("description") or "",
                parameters_json="" if parameters is None else json.dumps(parameters, ensure_ascii=False),
            )
        )
    return out


def tool_choice_proto(choice: ToolChoiceLike) -> inference_pb2.ToolChoice:
    """A ``ToolChoice`` from ``"none"``/``"auto"``/``"required"``, a proto, or OpenAI's named
    choice dict.

    Raises:
        ValueError: another string, or a dict that is not a named choice.
    """
    if isinstance(choice, inference_pb2.ToolChoice):
        return choice
    if isinstance(choice, str):
        if choice not in _TOOL_MODES:
            raise ValueError(f'tool_choice must be "none", "auto", "required" or a named function, got {choice!r}')
        return inference_pb2.ToolChoice(mode=_TOOL_MODES[choice])
    function = choice.get("function") if isinstance(choice, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ValueError(f'tool_choice must be {{"type": "function", "function": {{"name": ...}}}}, got {choice!r}')
    return inference_pb2.ToolChoice(function_name=function["name"])


def read_pem(source: PemSource | None, what: str) -> bytes | None:
    """PEM bytes from bytes, a PEM string, or a file path."""
    if source is None:
        return None
    if isinstance(source, bytes):
        return source
    if isinstance(source, str) and source.lstrip().startswith("-----BEGIN"):
        return source.encode()
    try:
        with open(source, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ValueError(f"cannot read {what} from {os.fspath(source)!r}: {exc.strerror}") from None


class _TokenPlugin(grpc.AuthMetadataPlugin):  # type: ignore[misc]
    """Call credentials that send ``authorization: Bearer <token>`` on each call."""

    def __init__(self, token: TokenSource) -> None:
        self._token = token

    def __call__(self, context: Any, callback: Any) -> None:
        try:
            token = self._token() if callable(self._token) else self._token
        except Exception as exc:
            callback(None, exc)
            return
        try:
            check_header_value("token", token)
        except ValueError as exc:
            callback(None, exc)
            return
        callback((("authorization", f"Bearer {token}"),), None)


@dataclass
class ChannelConfig:
    """Everything needed to open a channel; built once by each client."""

    target: str
    credentials: Any | None  # grpc.ChannelCredentials; None = plaintext
    options: list[tuple[str, Any]]
    token: TokenSource | None
    token_as_metadata: bool  # plaintext loopback: send the token as plain metadata
    extra_metadata: list[tuple[str, str]] = field(default_factory=list)
    root_certificates: bytes | None = None  # the PEM trust roots of a TLS channel (ca_cert)


def channel_config(
    target: str,
    *,
    tls: bool | None,
    ca_cert: PemSource | None,
    client_cert: PemSource | None,
    client_key: PemSource | None,
    token: TokenSource | None,
    server_name: str | None,
    allow_insecure_token: bool,
    max_receive_message_bytes: int,
    max_send_message_bytes: int,
    keepalive_time_s: float,
    keepalive_timeout_s: float,
    channel_options: Sequence[tuple[str, Any]],
    metadata: Sequence[tuple[str, str]] | None,
) -> ChannelConfig:
    if not target:
        raise ValueError("target must be 'host:port'")
    if (client_cert is None) != (client_key is None):
        raise ValueError("client_cert and client_key must be given together (mTLS)")
    use_tls = bool(tls) if tls is not None else any(x is not None for x in (ca_cert, client_cert))
    if tls is False and any(x is not None for x in (ca_cert, client_cert)):
        raise ValueError("tls=False contradicts ca_cert/client_cert")
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", int(max_receive_message_bytes)),
        ("grpc.max_send_message_length", int(max_send_message_bytes)),
        # The server permits pings every >= 10 s, with or without calls in flight.
        ("grpc.keepalive_time_ms", int(keepalive_time_s * 1000)),
        ("grpc.keepalive_timeout_ms", int(keepalive_timeout_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.primary_user_agent", f"xinserve-client-python/{CLIENT_VERSION}"),
    ]
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
    options.extend(channel_options)
    credentials = None
    token_as_metadata = False
    roots = read_pem(ca_cert, "ca_cert") if use_tls else None
    if use_tls:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=roots,
            private_key=read_pem(client_key, "client_key"),
            certificate_chain=read_pem(client_cert, "client_cert"),
        )
        if token is not None:
            credentials = grpc.composite_channel_credentials(
                credentials, grpc.metadata_call_credentials(_TokenPlugin(token))
            )
    elif token is not None:
        # grpc refuses call credentials on insecure channels; on loopback (or when the caller
        # says so) the token goes as ordinary per-call metadata instead.
        if not (allow_insecure_token or is_loopback_target(target)):
            raise ValueError(
                f"refusing to send a bearer token in plaintext to {target}: use TLS "
                "(ca_cert=...) or pass allow_insecure_token=True"
            )
        token_as_metadata = True
    if token is not None and not callable(token):
        check_header_value("token", token)
    if metadata:
        check_metadata(metadata)
    return ChannelConfig(
        target=target,
        credentials=credentials,
        options=options,
        token=token,
        token_as_metadata=token_as_metadata,
        extra_metadata=list(metadata or ()),
        root_certificates=roots,
    )


_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}\Z")
_HEADER_VALUE = re.compile(r"[\x20-\x7e]*\Z")
_HEADER_KEY = re.compile(r"[0-9a-z_.-]+\Z")


def check_request_id(request_id: str) -> None:
    """Check a request id against the server's rule (1..128 printable ASCII, no spaces).

    Raises:
        ValueError: naming ``request_id`` and the rule.
    """
    if not isinstance(request_id, str) or not _REQUEST_ID.match(request_id):
        raise ValueError(f"request_id must be 1..128 printable ASCII characters without spaces, got {request_id!r}")


def check_header_value(name: str, value: object) -> None:
    """Check that ``value`` can be sent as an ASCII gRPC metadata value (bytes 0x20..0x7E,
    per the gRPC over HTTP/2 spec's ASCII-Value).

    Raises:
        ValueError: naming ``name``; the value itself is not echoed (it may be a secret).
    """
    if not isinstance(value, str) or not _HEADER_VALUE.match(value):
        raise ValueError(f"{name} must be a string of printable ASCII characters (0x20..0x7E)")


def check_metadata(metadata: Sequence[tuple[str, str]]) -> None:
    """Check ``(key, value)`` pairs against gRPC's metadata rules: keys are lowercase
    ``[0-9a-z_.-]``; values of keys ending ``-bin`` are bytes, other values printable ASCII.

    Raises:
        ValueError: naming the offending key.
    """
    for item in metadata:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise ValueError(f"metadata must be (key, value) pairs, got {item!r}")
        key, value = item
        if not isinstance(key, str) or not _HEADER_KEY.match(key):
            raise ValueError(f"metadata key {key!r} must be lowercase ASCII letters, digits, '-', '_' or '.'")
        if key.endswith("-bin"):
            if not isinstance(value, bytes):
                raise ValueError(f"metadata {key!r} (a -bin key) must have a bytes value")
        else:
            check_header_value(f"metadata {key!r}", value)


def call_metadata(
    config: ChannelConfig,
    *,
    request_id: str | None,
    traceparent: str | None,
    tracestate: str | None,
    metadata: Sequence[tuple[str, str]] | None,
    generate_request_id: bool,
) -> tuple[list[tuple[str, str]], str | None]:
    """Per-call metadata and the request id it carries.

    Raises:
        ValueError: a request id, traceparent, tracestate, token or metadata pair that
            gRPC metadata or the server's request-id rule does not allow.
        UnavailableError: the token callable raised.
    """
    if request_id:
        check_request_id(request_id)
    if traceparent:
        check_header_value("traceparent", traceparent)
        if tracestate:
            check_header_value("tracestate", tracestate)
    if metadata:
        check_metadata(metadata)
    rid = request_id or (uuid.uuid4().hex if generate_request_id else None)
    md: list[tuple[str, str]] = list(config.extra_metadata)
    if rid:
        md.append(("x-request-id", rid))
    if traceparent:
        md.append(("traceparent", traceparent))
        if tracestate:
            md.append(("tracestate", tracestate))
    if config.token_as_metadata and config.token is not None:
        try:
            token = config.token() if callable(config.token) else config.token
        except Exception as exc:
            # Same class as grpc reports for a failing call-credentials plugin over TLS.
            raise UnavailableError(
                f"getting the bearer token failed: {exc}", code=grpc.StatusCode.UNAVAILABLE, request_id=rid
            ) from exc
        check_header_value("token", token)
        md.append(("authorization", f"Bearer {token}"))
    if metadata:
        md.extend(metadata)
    return md, rid


def check_schema(info: Any) -> None:
    """Raise IncompatibleServerError if the server no longer supports this client's revision."""
    if info.min_client_revision > SCHEMA_REVISION:
        raise IncompatibleServerError(
            f"the server needs xinserve.v1 schema revision >= {info.min_client_revision}, this client "
            f"implements {SCHEMA_REVISION}: upgrade xinserve-client",
            code=grpc.StatusCode.FAILED_PRECONDITION,
        )


def resolve_timeout(timeout: Timeout, default: float | None) -> float | None:
    if timeout is DEFAULT:
        return default
    if timeout is not None and timeout <= 0:
        raise ValueError("timeout must be > 0 seconds, or None for no deadline")
    return timeout  # type: ignore[return-value]


# --- grpc.health.v1 without a dependency on grpcio-health-checking -------------------------
# HealthCheckRequest { string service = 1; }  HealthCheckResponse { ServingStatus status = 1; }

HEALTH_CHECK_METHOD = "/grpc.health.v1.Health/Check"
HEALTH_STATUS_NAMES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_health_request(service: str) -> bytes:
    raw = service.encode()
    return b"\x0a" + _varint(len(raw)) + raw if raw else b""


def decode_health_response(data: bytes) -> str:
    """The ServingStatus name in a HealthCheckResponse (unknown fields skipped)."""
    pos, status = 0, 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        wire = key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            if key >> 3 == 1:
                status = value
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError("malformed HealthCheckResponse")
    return HEALTH_STATUS_NAMES.get(status, "UNKNOWN")


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
