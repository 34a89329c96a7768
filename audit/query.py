"""Queries and JSON-lines export (what ``AuditService`` and ``xinserve audit export`` call)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import IO, Any

from audit.errors import AuditConfigError, AuditEncodingError
from audit.records import MAX_SAFE_INT, EventType, decode_record, record_to_json
from audit.stores.base import QueryFilter, Store, StoredRecord

__all__ = [
    "GRPC_STATUS_NAMES",
    "QueryFilter",
    "export_jsonl",
    "parse_event",
    "parse_outcome",
    "parse_time_ms",
    "query_records",
    "stored_to_json",
]

GRPC_STATUS_NAMES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)
"""The gRPC status code names (``grpc.StatusCode``, in code order): the values of ``outcome``."""


def stored_to_json(row: StoredRecord) -> dict[str, Any]:
    """One exported record: its fields plus ``chain``, ``seq`` and the hex chain ``hash``.

    A row whose body does not decode (tampered) is exported with ``"corrupt": true`` and
    its indexed columns only; ``xinserve audit verify`` names it.
    """
    try:
        _, _, record = decode_record(row.body)
    except AuditEncodingError:
        return {
            "chain": row.chain,
            "seq": row.seq,
            "hash": row.hash.hex(),
            "corrupt": True,
            "time_ms": row.time_ms,
            "event": row.event,
            "outcome": row.outcome,
        }
    obj = record_to_json(record)
    obj.update(chain=row.chain, seq=row.seq, hash=row.hash.hex())
    obj["time"] = format_time_ms(record.time_ms)
    return obj


def query_records(store: Store, flt: QueryFilter) -> Iterator[dict[str, Any]]:
    """Records matching ``flt`` (time range, principal, method, outcome, event, chain), as dicts."""
    for row in store.query(flt):
        yield stored_to_json(row)


def export_jsonl(store: Store, flt: QueryFilter, out: IO[str]) -> int:
    """Write matching records as JSON lines (keys sorted, UTF-8); returns how many."""
    n = 0
    for obj in query_records(store, flt):
        out.write(json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n")
        n += 1
    return n


def format_time_ms(ms: int) -> str:
    """RFC 3339 UTC with milliseconds: ``2026-01-31T08:00:00.123Z``."""
    t = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_time_ms(text: str) -> int:
    """Epoch milliseconds from an integer string or an ISO 8601 date/time (naive means UTC).

    Raises ``AuditConfigError`` for text that is neither, or a time outside the records' range
    ``0..2**53-1`` ms (1970-01-01 onwards; record times are I-JSON integers).
    """
    text = text.strip()
    if text.lstrip("-").isdigit():
        ms = int(text)
    else:
        try:
            t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise AuditConfigError(f"not a time: {text!r} (use ISO 8601 or epoch milliseconds)") from None
        if t.tzinfo is None:
            t = t.replace(tzinfo=dt.timezone.utc)
        ms = int(t.timestamp() * 1000)
    if not 0 <= ms <= MAX_SAFE_INT:
        raise AuditConfigError(
            f"time {text!r} is out of range (from 1970-01-01T00:00:00Z, epoch milliseconds 0..{MAX_SAFE_INT})"
        )
    return ms


def parse_event(text: str) -> str:
    """An event type (``audit.records.EventType`` value, any case), else ``AuditConfigError`` naming them."""
    value = text.strip().lower()
    if value not in {str(e) for e in EventType}:
        raise AuditConfigError(f"unknown event type {text!r}; choose one of: {', '.join(str(e) for e in EventType)}")
    return value


def parse_outcome(text: str) -> str:
    """A gRPC status code name (any case, returned upper case), else ``AuditConfigError`` naming them."""
    value = text.strip().upper()
    if value not in GRPC_STATUS_NAMES:
        raise AuditConfigError(
            f"unknown outcome {text!r}: not a gRPC status code name; choose one of: {', '.join(GRPC_STATUS_NAMES)}"
        )
    return value
