"""The ErrorInfo reasons are the contract's ``xinserve.v1.ErrorReason`` (errors.proto).

Every reason the server can put in an ``ErrorInfo`` (and every ``code`` the OpenAI front end
sends) is a value of that enum: ``service.core.reasons.Reason`` holds exactly the enum's
values, no ``RpcError`` in ``service/`` names a reason by a string literal, and the OpenAI
``code`` is derived from the same catalogue.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from service.core.reasons import PREFIX, Reason, wire_name
from service.core.status import FieldViolation, RpcError, invalid_argument, not_found
from service.frontends.openai.connections import (
    CONNECTION_LIMIT,
    HEADER_TIMEOUT,
    HEADER_TOO_LARGE,
    ConnectionGuard,
    bad_request,
)
from service.frontends.openai.errors import http_error, openai_code
from xinserve.v1 import errors_pb2

SERVICE = Path(__file__).resolve().parents[2] / "service"

# the calls that take a reason, and the position of the reason among their arguments
_REASON_ARG = {"RpcError": 2, "invalid_argument": 1, "not_found": 2, "ErrorInfo": None}


def _proto_reasons() -> set[str]:
    return {name.removeprefix(PREFIX) for name in errors_pb2.ErrorReason.keys() if name != "ERROR_REASON_UNSPECIFIED"}


def test_reason_holds_exactly_the_enum_values() -> None:
    assert {r.value for r in Reason} == _proto_reasons()
    assert all(r.name == r.value for r in Reason)
    assert all(name.startswith(PREFIX) for name in errors_pb2.ErrorReason.keys())


def test_wire_name_strips_the_prefix_and_refuses_unspecified() -> None:
    assert wire_name(errors_pb2.ERROR_REASON_MODEL_NOT_FOUND) == "MODEL_NOT_FOUND"
    with pytest.raises(ValueError, match="UNSPECIFIED"):
        wire_name(errors_pb2.ERROR_REASON_UNSPECIFIED)


def _reason_arguments(tree: ast.AST) -> list[tuple[int, ast.expr]]:
    """(line, reason argument) of every call of RpcError, invalid_argument, not_found, ErrorInfo."""
    found: list[tuple[int, ast.expr]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name not in _REASON_ARG:
            continue
        position = _REASON_ARG[name]
        if position is not None and len(node.args) > position:
            found.append((node.lineno, node.args[position]))
        found.extend((node.lineno, kw.value) for kw in node.keywords if kw.arg == "reason")
    return found


def test_no_reason_outside_the_catalogue() -> None:
    """A reason given as a literal (or as a Reason member the enum lacks) would be a reason
    the contract does not list."""
    literals: list[str] = []
    unknown: list[str] = []
    calls = 0
    for path in sorted(SERVICE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for line, arg in _reason_arguments(tree):
            calls += 1
            where = f"{path.relative_to(SERVICE.parent)}:{line}"
            if isinstance(arg, ast.Constant | ast.JoinedStr):
                literals.append(where)
        imports_reason = any(
            isinstance(node, ast.ImportFrom) and node.module == "service.core.reasons" for node in ast.walk(tree)
        )
        for node in ast.walk(tree) if imports_reason else ():
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Reason":
                if node.attr not in Reason.__members__ and not node.attr.startswith("_"):
                    unknown.append(f"{path.relative_to(SERVICE.parent)}:{node.lineno}: Reason.{node.attr}")
    assert calls > 40, calls  # the scan found the server's errors
    assert literals == [], f"reason literals outside service/core/reasons.py: {literals}"
    assert unknown == []


def test_the_wire_carries_the_reason_string() -> None:
    err = not_found("model", "m", Reason.MODEL_NOT_FOUND)
    (detail,) = [d for d in err.to_status().trailing_metadata if d[0] == "grpc-status-details-bin"]
    status = status_pb2.Status.FromString(detail[1])
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert (info.reason, info.domain, dict(info.metadata)) == ("MODEL_NOT_FOUND", "xinserve.io", {"model": "m"})
    assert type(info.reason) is str


@pytest.mark.parametrize("reason", list(Reason))
def test_openai_code_is_the_reason_in_lower_case(reason: Reason) -> None:
    _, body, _ = http_error(RpcError(grpc.StatusCode.FAILED_PRECONDITION, "refused", reason))
    assert body["error"]["code"] == openai_code(reason) == reason.name.lower()
    assert type(body["error"]["code"]) is str


def test_invalid_argument_names_the_first_field_in_metadata() -> None:
    err = invalid_argument([FieldViolation("sampling_params.top_p", "must be in (0, 1]"), FieldViolation("n", "x")])
    assert (err.reason, err.metadata) == (Reason.INVALID_ARGUMENT, {"field": "sampling_params.top_p"})
    status, body, _ = http_error(err)
    assert (status, body["error"]["code"], body["error"]["param"]) == (400, "invalid_argument", "top_p")


def _listener_code(reply: bytes) -> str:
    return json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["code"]


def test_the_listener_replies_use_catalogue_codes() -> None:
    codes = {openai_code(r) for r in Reason}
    replies = [bad_request("r1")] + [
        ConnectionGuard.refusal(kind, "r1") for kind in (HEADER_TOO_LARGE, HEADER_TIMEOUT, CONNECTION_LIMIT)
    ]
    got = [_listener_code(reply) for reply in replies]
    assert got == ["invalid_http_request", "request_header_fields_too_large", "request_timeout", "too_many_connections"]
    assert set(got) <= codes
