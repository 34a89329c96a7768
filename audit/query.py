"""Queries and JSON-lines export (what ``AuditService`` and ``xinserve audit export`` call)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import IO, Any

from audit.errors import AuditConfigError, AuditEncodingError
from audit.records import decode_record, record_to_json
from audit.stores.base import QueryFilter, Store, StoredRecord

__all__ = ["QueryFilter", "export_jsonl", "parse_time_ms", "query_records", "stored_to_json"]


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
    t = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_time_ms(text: str) -> int:
    """Epoch milliseconds from an integer string or an ISO 8601 date/time (naive means UTC)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise AuditConfigError(f"not a time: {text!r} (use ISO 8601 or epoch milliseconds)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)
