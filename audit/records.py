"""Audit records and their canonical encoding.

The canonical encoding of a record is the byte string that the hash chain covers. It is
JSON restricted so that one value has exactly one encoding (a subset of RFC 8785, JCS):

* UTF-8, no byte-order mark, no insignificant whitespace;
* object members sorted by key (all keys are ASCII, so code-point order equals JCS's
  UTF-16 order); absent optional fields (``None``) are omitted, never written as ``null``;
* values are strings, integers in the I-JSON range ``[-(2**53)+1, 2**53-1]``, booleans or
  objects of those — no floats, no ``null`` inside ``detail``;
* strings are escaped as JCS does: ``"`` and ``\\`` and ``\\b \\f \\n \\r \\t`` with their
  short escapes, other control characters as ``\\u00xx`` (lower-case hex), everything else
  verbatim; strings must be valid Unicode scalar values (no lone surrogates).

See docs/audit.md for the field list and the chain format.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _quote
from typing import Any

from audit.errors import AuditEncodingError
from trust.compat import StrEnum

FORMAT_VERSION = 1
MAX_SAFE_INT = 2**53 - 1
_DETAIL_KEY = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_HEX = re.compile(r"[0-9a-f]*")


class EventType(StrEnum):
    """What a record is about. ``rpc`` for every gRPC call; the rest are system events."""

    RPC = "rpc"
    START = "start"
    STOP = "stop"
    CONFIG_LOADED = "config_loaded"
    MODEL_VERIFIED = "model_verified"
    MODEL_LOADED = "model_loaded"
    MODEL_UNLOADED = "model_unloaded"
    KEY_USED = "key_used"
    DRAIN = "drain"
    RETENTION_RUN = "retention_run"
    AUDIT_VERIFIED = "audit_verified"
    AUDITOR_QUERY = "auditor_query"
    AUDIT_RECOVERED = "audit_recovered"
    AUDIT_RECORDS_LOST = "audit_records_lost"
    ATTESTATION_COLLECTED = "attestation_collected"
    """TEE evidence was collected (``purpose``: startup, key_release, client); ``recorded`` marks
    replayed evidence. Carries SM3 digests of the evidence and report data, never the evidence."""
    KEY_RELEASED = "key_released"
    """A key broker released a model key (``kbs``, ``resource``); never the key itself."""
    KEY_REFUSED = "key_refused"
    """A model key was not released (``kbs``, ``resource``, ``reason``); the model is not served."""
    AUDIT_ANCHOR_SHIPPING = "audit_anchor_shipping"
    """The syslog collector went down (``UNAVAILABLE``), came back (``OK``), anchors were dropped
    from the full buffer (``DATA_LOSS``, ``count``) or a checkpoint got no time-stamp."""
    CREDENTIALS_RELOADED = "credentials_reloaded"
    """The token file was reloaded (SIGHUP): ``principals_added``, ``principals_removed``,
    ``roles_changed``, ``tokens_changed`` (principal names); ``FAILED_PRECONDITION`` with
    ``reason`` when it did not load and the previous tokens stay."""
    TRUST_STORE_RELOADED = "trust_store_reloaded"
    """The trust store was reloaded (SIGHUP): ``keys_trusted``, ``keys_untrusted``,
    ``keys_revoked``, ``keys_unrevoked`` (key ids); ``FAILED_PRECONDITION`` with ``reason``
    when it did not load and the previous store stays."""
    AUDIT_STORE_REPLACED = "audit_store_replaced"
    """The audit database was deleted or replaced under the running writer (sent to the anchor
    stream and the process log, as the log itself cannot take it), or, at start, an earlier
    log's traces were found with no log and ``audit.previous_log_retired`` (``OK``, ``traces``)."""
    LOGIN_LOCKOUT = "login_lockout"
    """Failed logins started a lockout (``RESOURCE_EXHAUSTED``): ``scope`` (``peer``,
    ``principal``, ``certificate``, ``token``, ``global``), ``locked`` (the host, principal or
    certificate name), ``peer``, ``failures``, ``window_ms``, ``lockout_ms``. One per lockout,
    not per refused call."""
    RPC_BEGIN = "rpc_begin"
    """A streamed or long call started (written before its first output); its ``rpc`` record
    follows with the same ``request_id``. A begin without an end means the process died."""


DetailValue = str | int | bool


def now_ms() -> int:
    """The current UTC time in integer milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audited event, as the server hands it to :meth:`audit.log.AuditLog.append`.

    The chain position (chain id, sequence number) is assigned by the log, not here.
    All text is free of prompt content: prompts and outputs appear only as SM3 digests
    (``prompt_sm3``/``output_sm3``, lower-case hex) and, when content capture is on, as
    SM4-GCM ciphertext (``content``) under the key named by ``content_key_id``.
    """

    event: EventType
    outcome: str = "OK"
    """gRPC status code name (``OK``, ``UNAVAILABLE``, ``CANCELLED``...); system events use the same names."""
    time_ms: int = field(default_factory=now_ms)
    """UTC time in milliseconds since the Unix epoch."""
    # subject
    principal: str | None = None
    auth_method: str | None = None
    """``mtls``, ``token`` or ``none``."""
    cert_fingerprint: str | None = None
    """Lower-case hex digest of the client certificate (DER), whenever one was presented."""
    cert_subject: str | None = None
    """The client certificate's subject in canonical form (``audit.principals.render_name``),
    whenever one was presented: with a bearer token too, ``principal`` is the token's."""
    peer: str | None = None
    # object
    method: str | None = None
    """Full gRPC method, ``/xinserve.v1.InferenceService/Generate``."""
    model: str | None = None
    manifest_digest: str | None = None
    # correlation
    request_id: str | None = None
    trace_id: str | None = None
    # measures
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    latency_us: int | None = None
    """Server-side call duration in microseconds."""
    # content
    prompt_sm3: str | None = None
    output_sm3: str | None = None
    content: bytes | None = None
    """Sealed content (SM4-GCM, see :mod:`audit.content`), opt-in."""
    content_key_id: str | None = None
    detail: Mapping[str, DetailValue] = field(default_factory=dict)
    """Small typed facts for system events (config digest, key id, counts). Never secrets."""

    def __post_init__(self) -> None:
        if not isinstance(self.event, EventType):
            object.__setattr__(self, "event", EventType(self.event))
        object.__setattr__(self, "detail", dict(self.detail))


class FieldKind(StrEnum):
    """How a record field is encoded: its JSON type and the checks on it."""

    EVENT = "event"
    TEXT = "text"
    INT = "int"
    HEX = "hex"
    """Lower-case hex text."""
    BYTES = "bytes"
    """Base64 text."""
    DETAIL = "detail"


RECORD_FIELDS: Mapping[int, Mapping[str, FieldKind]] = {
    1: {
        "event": FieldKind.EVENT,
        "outcome": FieldKind.TEXT,
        "time_ms": FieldKind.INT,
        "principal": FieldKind.TEXT,
        "auth_method": FieldKind.TEXT,
        "cert_fingerprint": FieldKind.TEXT,
        "cert_subject": FieldKind.TEXT,
        "peer": FieldKind.TEXT,
        "method": FieldKind.TEXT,
        "model": FieldKind.TEXT,
        "manifest_digest": FieldKind.TEXT,
        "request_id": FieldKind.TEXT,
        "trace_id": FieldKind.TEXT,
        "prompt_tokens": FieldKind.INT,
        "output_tokens": FieldKind.INT,
        "latency_us": FieldKind.INT,
        "prompt_sm3": FieldKind.HEX,
        "output_sm3": FieldKind.HEX,
        "content": FieldKind.BYTES,
        "content_key_id": FieldKind.TEXT,
        "detail": FieldKind.DETAIL,
    },
}
"""The record fields of each format version (``v``), with their encoding. The rule for how the
format grows (docs/audit.md, *Record format versions*): a version's fields never change once
records were written with it; a field is added only with a new version, whose entry lists every
field it has; the decoder accepts exactly the fields its version declares."""


def check_declared(record_fields: frozenset[str], declared: Mapping[str, FieldKind]) -> None:
    """Raise ``TypeError`` unless ``record_fields`` (``AuditRecord``'s) equal ``declared`` (the
    current version's entry of :data:`RECORD_FIELDS`)."""
    undeclared, missing = record_fields - set(declared), set(declared) - record_fields
    if undeclared or missing:
        raise TypeError(
            f"AuditRecord and RECORD_FIELDS[{FORMAT_VERSION}] differ: undeclared {sorted(undeclared)}, "
            f"missing {sorted(missing)}; a new field needs a new format version (docs/audit.md)"
        )


_FIELDS = RECORD_FIELDS[FORMAT_VERSION]
check_declared(frozenset(f.name for f in dataclasses.fields(AuditRecord)), _FIELDS)
_STR_FIELDS = tuple(name for name, kind in _FIELDS.items() if kind is FieldKind.TEXT)
_INT_FIELDS = tuple(name for name, kind in _FIELDS.items() if kind is FieldKind.INT)
_HEX_FIELDS = tuple(name for name, kind in _FIELDS.items() if kind is FieldKind.HEX)
_ALL_FIELDS = frozenset(_FIELDS)
_ENVELOPE = frozenset({"v", "chain", "seq"})


def _check_str(name: str, value: object) -> str:
    # Validity as Unicode (no lone surrogates) is checked once, when the whole object is encoded.
    if type(value) is not str and not isinstance(value, str):
        raise AuditEncodingError(f"field {name!r} must be a string")
    return value


def _check_int(name: str, value: object) -> int:
    if type(value) is not int and (not isinstance(value, int) or isinstance(value, bool)):
        raise AuditEncodingError(f"field {name!r} must be an integer")
    if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:  # type: ignore[operator]
        raise AuditEncodingError(f"field {name!r} is outside the I-JSON integer range")
    return value  # type: ignore[return-value]


def record_to_obj(record: AuditRecord, chain: str, seq: int) -> dict[str, Any]:
    """The JSON object (before serialisation) of a record at a chain position."""
    obj: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "chain": _check_str("chain", chain),
        "seq": _check_int("seq", seq),
        "event": record.event.value,
    }
    # Hot path (every append): plain type checks inline; the helpers only build the error.
    for name in _STR_FIELDS:
        value = getattr(record, name)
        if value is not None:
            if type(value) is not str:
                _check_str(name, value)
            obj[name] = value
    for name in _INT_FIELDS:
        value = getattr(record, name)
        if value is not None:
            if type(value) is not int or not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
                _check_int(name, value)
            obj[name] = value
    for name in _HEX_FIELDS:
        value = getattr(record, name)
        if value is not None:
            if not isinstance(value, str) or not _HEX.fullmatch(value):
                raise AuditEncodingError(f"field {name!r} must be lower-case hex")
            obj[name] = value
    if record.content is not None:
        if not isinstance(record.content, bytes):
            raise AuditEncodingError("field 'content' must be bytes")
        obj["content"] = base64.b64encode(record.content).decode("ascii")
    if record.detail:
        detail: dict[str, DetailValue] = {}
        for key, value in record.detail.items():
            if not isinstance(key, str) or not _DETAIL_KEY.match(key):
                raise AuditEncodingError(f"detail key {key!r} must match [a-z][a-z0-9_]{{0,63}}")
            if isinstance(value, bool):
                detail[key] = value
            elif isinstance(value, int):
                detail[key] = _check_int(f"detail.{key}", value)
            else:
                detail[key] = _check_str(f"detail.{key}", value)
        obj["detail"] = detail
    return obj


_encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(obj: Mapping[str, Any]) -> bytes:
    """Serialise an already validated object canonically (see the module docstring)."""
    try:
        return _encoder.encode(obj).encode("utf-8")
    except UnicodeEncodeError:
        raise AuditEncodingError("a string is not valid Unicode (lone surrogate)") from None


def _plan() -> list[tuple[str, str, str]]:
    kinds = dict.fromkeys(_STR_FIELDS, "s") | dict.fromkeys(_INT_FIELDS, "i") | dict.fromkeys(_HEX_FIELDS, "h")
    kinds |= {"content": "c", "detail": "d", "event": "e", "chain": "C", "seq": "S", "v": "V"}
    assert set(kinds) == _ALL_FIELDS | _ENVELOPE
    return [(name, kinds[name], f'"{name}":') for name in sorted(kinds)]


# Members in canonical (sorted) order with how to render each: the append hot path renders
# the JSON directly instead of building a dict and sorting it (~40% cheaper). The result is
# identical to canonical_json(record_to_obj(...)), which tests check with hypothesis.
_PLAN = _plan()


def encode_record(record: AuditRecord, chain: str, seq: int) -> bytes:
    """Canonical bytes of ``record`` at position ``seq`` of ``chain``."""
    parts: list[str] = []
    add = parts.append
    try:
        for name, kind, prefix in _PLAN:
            if kind == "s" or kind == "h":
                value = getattr(record, name)
                if value is None:
                    continue
                if type(value) is not str or (kind == "h" and not _HEX.fullmatch(value)):
                    raise _Slow
                add(prefix + _quote(value))
            elif kind == "i":
                value = getattr(record, name)
                if value is None:
                    continue
                if type(value) is not int or not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
                    raise _Slow
                add(prefix + str(value))
            elif kind == "e":
                add(prefix + _quote(record.event.value))
            elif kind == "C":
                if type(chain) is not str:
                    raise _Slow
                add(prefix + _quote(chain))
            elif kind == "S":
                if type(seq) is not int or not -MAX_SAFE_INT <= seq <= MAX_SAFE_INT:
                    raise _Slow
                add(prefix + str(seq))
            elif kind == "V":
                add(prefix + str(FORMAT_VERSION))
            elif kind == "c":
                if record.content is not None:
                    if type(record.content) is not bytes:
                        raise _Slow
                    add(prefix + '"' + base64.b64encode(record.content).decode("ascii") + '"')
            elif record.detail:  # "d"
                raise _Slow
    except _Slow:
        # Unusual input (detail, subclasses, invalid values): the general path, which also
        # raises the precise AuditEncodingError.
        return canonical_json(record_to_obj(record, chain, seq))
    try:
        return ("{" + ",".join(parts) + "}").encode("utf-8")
    except UnicodeEncodeError:
        raise AuditEncodingError("a string is not valid Unicode (lone surrogate)") from None


class _Slow(Exception):
    pass


def _reject_float(value: str) -> Any:
    raise AuditEncodingError("floats are not allowed in the canonical encoding")


def _reject_constant(value: str) -> Any:
    raise AuditEncodingError("NaN/Infinity are not allowed in the canonical encoding")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise AuditEncodingError("duplicate key in canonical JSON")
    return result


def parse_body(body: bytes) -> dict[str, Any]:
    """Parse canonical bytes into a JSON object, strictly (no floats, no duplicate keys)."""
    try:
        obj = json.loads(
            body.decode("utf-8"),
            parse_float=_reject_float,
            parse_constant=_reject_constant,
            object_pairs_hook=_no_duplicates,
        )
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise AuditEncodingError("record body is not valid canonical JSON") from exc
    if not isinstance(obj, dict):
        raise AuditEncodingError("record body is not a JSON object")
    return obj


def decode_record(body: bytes) -> tuple[str, int, AuditRecord]:
    """Inverse of :func:`encode_record`: ``(chain, seq, record)``.

    Raises :class:`AuditEncodingError` unless ``body`` is exactly the canonical encoding of
    what it decodes to (so two different byte strings never verify as the same record).
    """
    obj = parse_body(body)
    version = obj.get("v")
    if type(version) is not int or version not in RECORD_FIELDS:
        raise AuditEncodingError("unsupported record format version")
    unknown = set(obj) - set(RECORD_FIELDS[version]) - _ENVELOPE
    if unknown:
        raise AuditEncodingError(f"unknown record fields: {sorted(unknown)}")
    kwargs: dict[str, Any] = {k: v for k, v in obj.items() if k not in _ENVELOPE}
    if "content" in kwargs:
        try:
            kwargs["content"] = base64.b64decode(kwargs["content"], validate=True)
        except (ValueError, TypeError) as exc:
            raise AuditEncodingError("field 'content' is not base64") from exc
    try:
        kwargs["event"] = EventType(kwargs["event"])
        record = AuditRecord(**kwargs)
    except (KeyError, ValueError, TypeError) as exc:
        raise AuditEncodingError("record body does not describe a valid record") from exc
    chain, seq = obj.get("chain"), obj.get("seq")
    if not isinstance(chain, str) or not isinstance(seq, int) or isinstance(seq, bool):
        raise AuditEncodingError("record body lacks its chain position")
    if encode_record(record, chain, seq) != body:
        raise AuditEncodingError("record body is not in canonical form")
    return chain, seq, record


def record_to_json(record: AuditRecord) -> dict[str, Any]:
    """A plain JSON-able dict of a record for export (content as base64)."""
    obj: dict[str, Any] = {}
    for f in dataclasses.fields(AuditRecord):
        value = getattr(record, f.name)
        if value is None or (f.name == "detail" and not value):
            continue
        if f.name == "content":
            value = base64.b64encode(value).decode("ascii")
        elif f.name == "event":
            value = str(value)
        elif f.name == "detail":
            value = dict(value)
        obj[f.name] = value
    return obj
