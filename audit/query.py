"""Queries and JSON-lines export (what ``AuditService`` and ``xinserve audit export`` call)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import IO, Any

from audit.errors import AuditConfigError, AuditEncodingError
from audit.principals import PrincipalFilterError, principal_candidates
from audit.records import MAX_SAFE_INT, EventType, decode_record, record_to_json
from audit.stores.base import QueryFilter, Store, StoredRecord

__all__ = [
    "FILTER_TEXT_CHARS",
    "GRPC_STATUS_NAMES",
    "FilterError",
    "QueryFilter",
    "export_jsonl",
    "parse_time_ms",
    "query_filter",
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


FILTER_TEXT_CHARS = 512
"""The longest principal, method, outcome or event a query filter takes, in characters."""


class FilterError(Exception):
    """A query filter with bad fields. ``violations``: ``[(field, message)]`` in field order,
    each field by its neutral name (``since_ms``, ``until_ms``, ``principal``, ``method``,
    ``outcome``, ``event``) for the caller to name as its interface does (``filter.until_ms``
    in AuditService, ``--until`` in the CLI). Safe to show: it quotes no value."""

    def __init__(self, violations: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{field} {message}" for field, message in violations))
        self.violations = violations


def query_filter(
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    principal: str | None = None,
    method: str | None = None,
    outcome: str | None = None,
    event: str | None = None,
    chain: str | None = None,
    limit: int | None = None,
    descending: bool = False,
) -> QueryFilter:
    """The one rule for an auditor's record filter, for ``AuditService.QueryRecords`` and
    ``xinserve audit export``/``tail``: times in ``0..2**53-1`` epoch ms with ``until_ms``
    (exclusive) later than ``since_ms`` (inclusive), so an empty range is refused rather than
    answered with no records; principal, method, outcome and event at most
    ``FILTER_TEXT_CHARS`` characters; ``outcome`` a gRPC status code name and ``event`` an
    ``EventType`` value, either in any case (stored canonical: upper, lower); ``principal`` as
    ``audit.principals.principal_candidates`` reads it. ``chain``, ``limit`` and ``descending``
    are passed on (each interface bounds its own paging). A typo must not read as "no such records".

    Raises:
        FilterError: naming every bad field.
    """
    bad: list[tuple[str, str]] = []
    for name, value in (("since_ms", since_ms), ("until_ms", until_ms)):
        if value is not None and not 0 <= value <= MAX_SAFE_INT:
            bad.append((name, f"must be between 0 and {MAX_SAFE_INT} (epoch milliseconds from 1970)"))
    if since_ms is not None and until_ms is not None and until_ms <= since_ms:
        bad.append(("until_ms", "must be later than since_ms (the range holds since_ms, not until_ms)"))
    texts = {"principal": principal, "method": method, "outcome": outcome, "event": event}
    for name, text in texts.items():
        if text is not None and len(text) > FILTER_TEXT_CHARS:
            bad.append((name, f"is longer than {FILTER_TEXT_CHARS} characters"))
            texts[name] = None
    outcome, event = texts["outcome"], texts["event"]
    if outcome is not None and outcome.strip().upper() not in GRPC_STATUS_NAMES:
        bad.append(("outcome", f"is not a gRPC status code name; choose one of: {', '.join(GRPC_STATUS_NAMES)}"))
    if event is not None and event.strip().lower() not in {str(e) for e in EventType}:
        bad.append(("event", f"is not an event type; choose one of: {', '.join(str(e) for e in EventType)}"))
    principal_any = None
    if texts["principal"] is not None:
        try:
            principal_any = principal_candidates(texts["principal"])
        except PrincipalFilterError as exc:
            bad.append(("principal", str(exc)))
    if bad:
        raise FilterError(bad)
    return QueryFilter(
        chain=chain,
        since_ms=since_ms,
        until_ms=until_ms,
        principal_any=principal_any,
        method=method,
        outcome=outcome.strip().upper() if outcome is not None else None,
        event=event.strip().lower() if event is not None else None,
        limit=limit,
        descending=descending,
    )


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
