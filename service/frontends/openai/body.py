"""Reading and parsing an OpenAI request body: declared as JSON (``application/json``, UTF-8
only, RFC 8259 section 8.1; no ``Content-Encoding``), received within the body limits of
``service.core.body_reception``, parsed strictly (no NaN or Infinity, no duplicate keys, every
string valid Unicode)."""

from __future__ import annotations

import codecs
import json
import math
from email.message import Message
from email.utils import collapse_rfc2231_value
from typing import Any

import grpc
from starlette.requests import ClientDisconnect, Request

from service.core.body_reception import receive_body
from service.core.reasons import Reason
from service.core.status import FieldViolation, RpcError, invalid_argument
from service.frontends.openai.schemas import (
    lone_surrogate,
)


def json_content_type(request: Request) -> None:
    """Refuse a body not declared as JSON: its ``Content-Type`` must be ``application/json``
    (any case, with or without parameters such as ``charset=utf-8``), as OpenAI's API and its
    SDKs (which always send it) expect. The header is parsed as RFC 9110 section 8.3 defines
    it, by the standard library's MIME header parser.

    Raises:
        RpcError: INVALID_ARGUMENT/UNSUPPORTED_MEDIA_TYPE (415) naming ``content-type``, or
            naming ``content-encoding`` for a coding other than ``identity``
            (``_identity_encoding``).
    """
    declared = request.headers.getlist("content-type")
    if len(declared) == 1:
        header = Message()
        header["content-type"] = declared[0]
        if "/" in declared[0] and header.get_content_type() == "application/json":
            _utf8_charset(header.get_param("charset"))
            _identity_encoding(request)
            return
    if not declared:
        shown = "none"
    elif len(declared) > 1:
        shown = f"{len(declared)} headers"
    else:
        shown = repr(declared[0][:64])
    raise invalid_argument(
        [FieldViolation("content-type", f"must be application/json, got {shown}")], Reason.UNSUPPORTED_MEDIA_TYPE
    )


def _utf8_charset(charset: Any) -> None:
    """Refuse a ``charset`` parameter naming anything but UTF-8: JSON text is UTF-8 (RFC
    8259 section 8.1), and a body sent in another charset would be read as something else.

    Raises:
        RpcError: INVALID_ARGUMENT/UNSUPPORTED_MEDIA_TYPE (415) naming ``content-type``.
    """
    if charset is None:
        return
    name = collapse_rfc2231_value(charset)
    try:
        utf8 = codecs.lookup(name).name == "utf-8"
    except LookupError:
        utf8 = False
    if not utf8:
        raise invalid_argument(
            [FieldViolation("content-type", f"charset must be utf-8 (JSON is UTF-8, RFC 8259), got {name[:32]!r}")],
            Reason.UNSUPPORTED_MEDIA_TYPE,
        )


def _identity_encoding(request: Request) -> None:
    """Refuse a body with a ``Content-Encoding`` (RFC 9110 section 8.4) other than ``identity``:
    no coding is decoded here, so such a body would be read as JSON unchanged.

    Raises:
        RpcError: INVALID_ARGUMENT/UNSUPPORTED_MEDIA_TYPE (415) naming ``content-encoding``.
    """
    codings = [c.strip().lower() for v in request.headers.getlist("content-encoding") for c in v.split(",")]
    unsupported = [c for c in codings if c and c != "identity"]
    if unsupported:
        raise invalid_argument(
            [FieldViolation("content-encoding", f"only identity is supported, got {unsupported[0][:32]!r}")],
            Reason.UNSUPPORTED_MEDIA_TYPE,
        )


class _NonFiniteNumber(Exception):
    """A JSON body holds ``NaN``/``Infinity`` (which Python's parser accepts and JSON does not,
    RFC 8259 section 6) or a number too large for a double (``1e400``)."""


def _no_constant(name: str) -> Any:
    raise _NonFiniteNumber(name)


class _DuplicateKey(Exception):
    """A JSON object in the body names one key twice (RFC 8259 section 4: names SHOULD be
    unique); parsers differ on which value wins, so a gateway may read another request."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: the object, or ``_DuplicateKey`` naming the key."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFiniteNumber(text[:32])
    return value


async def read_body(request: Request, limit: int, timeout_s: float, min_rate: int, grace_s: float) -> bytes:
    """The request body's bytes, at most ``limit``, received in full within ``timeout_s``
    seconds and at ``min_rate`` bytes per second after ``grace_s`` seconds
    (``service.core.body_reception.receive_body``). Nothing is read from a body not declared as
    JSON (its call is refused with 415).

    Raises:
        RpcError: RESOURCE_EXHAUSTED/REQUEST_TOO_LARGE (413), DEADLINE_EXCEEDED/REQUEST_TIMEOUT
            or REQUEST_BODY_TOO_SLOW (408), or CANCELLED/CLIENT_DISCONNECTED (the client went
            away while sending it).
    """
    try:
        json_content_type(request)
    except RpcError:
        return b""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RpcError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"the request body exceeds {limit} bytes",
            Reason.REQUEST_TOO_LARGE,
            metadata={"limit_bytes": str(limit)},
        )
    try:
        return await receive_body(request.stream(), limit, timeout_s, min_rate, grace_s)
    except ClientDisconnect:
        raise RpcError(
            grpc.StatusCode.CANCELLED,
            "the client disconnected while sending the request body",
            Reason.CLIENT_DISCONNECTED,
        ) from None


def parse_json(request: Request, body: bytes) -> Any:
    """The request body as JSON, every string valid Unicode.

    Raises:
        RpcError: UNSUPPORTED_MEDIA_TYPE (415) when not declared as JSON, INVALID_ARGUMENT
            (not JSON, or a string with a lone surrogate, named by its JSON path; NaN,
            Infinity or a number too large for a double; an object naming a key twice, named).
    """
    json_content_type(request)
    try:
        data = json.loads(body, parse_constant=_no_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys)
    except _DuplicateKey as dup:
        key = str(dup.args[0])[:64]
        named = key if lone_surrogate(key) is None else "body"
        raise invalid_argument([FieldViolation(named, f"key {key!a} is given more than once")]) from None
    except _NonFiniteNumber:
        raise invalid_argument([FieldViolation("body", "holds NaN, Infinity or a number beyond a double")]) from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise invalid_argument([FieldViolation("body", "is not valid JSON")]) from None
    except RecursionError:
        raise invalid_argument([FieldViolation("body", "nests arrays or objects too deeply")]) from None
    except ValueError:  # an integer longer than Python's int conversion limit (sys.get_int_max_str_digits)
        raise invalid_argument([FieldViolation("body", "holds a number with too many digits")]) from None
    bad = lone_surrogate(data)
    if bad is not None:
        raise invalid_argument([FieldViolation(*bad)])
    return data
