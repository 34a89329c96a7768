"""AuditService's record filter and ``xinserve audit export``'s options follow one rule
(``audit.query.query_filter``): the same ranges, lengths and names are refused or accepted on
both, each naming the field as its interface does."""

from __future__ import annotations

from types import SimpleNamespace

import grpc
import pytest

from audit.query import FilterError, query_filter
from service.core.status import RpcError
from service.frontends.grpc.audit_servicer import _filter
from xinserve.v1 import audit_pb2


def _grpc(**fields) -> audit_pb2.QueryRecordsRequest:
    return audit_pb2.QueryRecordsRequest(filter=audit_pb2.AuditFilter(**fields))


def _refused(request) -> dict[str, str]:
    with pytest.raises(RpcError) as err:
        _filter(request, SimpleNamespace(audit_detail={}))
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    return {v.field: v.description for v in err.value.violations}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"since_ms": 5, "until_ms": 5}, "until_ms"),
        ({"since_ms": 6, "until_ms": 5}, "until_ms"),
        ({"until_ms": 2**62}, "until_ms"),
        ({"principal": "p" * 513}, "principal"),
        ({"method": "m" * 513}, "method"),
        ({"outcome": "NOT_A_CODE"}, "outcome"),
        ({"event": "bogus"}, "event"),
    ],
)
def test_both_interfaces_refuse_the_same_filters(fields, field):
    assert set(_refused(_grpc(**fields))) == {f"filter.{field}"}
    with pytest.raises(FilterError) as err:
        query_filter(**fields)
    assert [f for f, _ in err.value.violations] == [field]


def test_outcome_and_event_in_any_case_are_stored_canonical():
    detail: dict = {}
    flt = _filter(_grpc(outcome="permission_denied", event="RPC"), SimpleNamespace(audit_detail=detail))
    assert (flt.outcome, flt.event) == ("PERMISSION_DENIED", "rpc")
    assert (detail["filter_outcome"], detail["filter_event"]) == ("PERMISSION_DENIED", "rpc")
    cli = query_filter(outcome="Permission_Denied", event="Rpc")
    assert (cli.outcome, cli.event) == ("PERMISSION_DENIED", "rpc")


def test_every_bad_field_is_named_at_once():
    named = _refused(_grpc(since_ms=9, until_ms=1, event="x", limit=10**6))
    assert set(named) == {"filter.until_ms", "filter.event", "filter.limit"}
    assert "later than since_ms" in named["filter.until_ms"]
