"""Canonical encoding of audit records (property tests)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.errors import AuditEncodingError
from audit.records import (
    FORMAT_VERSION,
    MAX_SAFE_INT,
    RECORD_FIELDS,
    AuditRecord,
    EventType,
    FieldKind,
    canonical_json,
    check_declared,
    decode_record,
    encode_record,
    record_to_obj,
)

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
opt_text = st.none() | text
opt_int = st.none() | st.integers(min_value=-MAX_SAFE_INT, max_value=MAX_SAFE_INT)
hexstr = st.none() | st.binary(min_size=32, max_size=32).map(bytes.hex)
detail_key = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)
detail_val = st.booleans() | st.integers(min_value=-MAX_SAFE_INT, max_value=MAX_SAFE_INT) | text

_BY_KIND = {
    FieldKind.EVENT: st.sampled_from(list(EventType)),
    FieldKind.TEXT: opt_text,
    FieldKind.INT: opt_int,
    FieldKind.HEX: hexstr,
    FieldKind.BYTES: st.none() | st.binary(max_size=64),
    FieldKind.DETAIL: st.dictionaries(detail_key, detail_val, max_size=5),
}
_NARROWER = {
    "outcome": st.sampled_from(["OK", "CANCELLED", "UNAVAILABLE", "PERMISSION_DENIED"]) | text,
    "time_ms": st.integers(min_value=0, max_value=MAX_SAFE_INT),
    "cert_fingerprint": hexstr,
}
# Built from the record's own declared fields: a new field is fuzzed without editing this test.
records = st.builds(
    AuditRecord,
    **{name: _NARROWER.get(name, _BY_KIND[kind]) for name, kind in RECORD_FIELDS[FORMAT_VERSION].items()},
)


def test_every_record_field_is_declared_for_the_format_version() -> None:
    """``AuditRecord``'s fields are exactly those its format version declares (so all are fuzzed)."""
    assert {f.name for f in dataclasses.fields(AuditRecord)} == set(RECORD_FIELDS[FORMAT_VERSION])
    with pytest.raises(TypeError, match=r"undeclared \['extra_field'\]"):
        check_declared(frozenset(RECORD_FIELDS[FORMAT_VERSION]) | {"extra_field"}, RECORD_FIELDS[FORMAT_VERSION])


chains = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)
seqs = st.integers(min_value=1, max_value=MAX_SAFE_INT)


@settings(max_examples=150, deadline=None)
@given(records, chains, seqs)
def test_roundtrip_and_determinism(record: AuditRecord, chain: str, seq: int) -> None:
    body = encode_record(record, chain, seq)
    assert encode_record(record, chain, seq) == body
    c, s, back = decode_record(body)
    assert (c, s, back) == (chain, seq, record)
    assert encode_record(back, c, s) == body


@settings(max_examples=150, deadline=None)
@given(records, chains, seqs)
def test_fast_path_equals_general_encoder(record: AuditRecord, chain: str, seq: int) -> None:
    assert encode_record(record, chain, seq) == canonical_json(record_to_obj(record, chain, seq))


@settings(max_examples=100, deadline=None)
@given(records, chains, seqs)
def test_matches_jcs_rules(record: AuditRecord, chain: str, seq: int) -> None:
    """Sorted keys, no whitespace, no null, UTF-8 — what an independent implementation produces."""
    body = encode_record(record, chain, seq)
    obj = json.loads(body)

    def strip(o):  # independent reference: sort keys by UTF-16 code units, as RFC 8785 does
        if isinstance(o, dict):
            return {k: strip(o[k]) for k in sorted(o, key=lambda k: k.encode("utf-16-be"))}
        return o

    assert "null" not in json.dumps([v for v in obj.values() if v is None])
    assert all(v is not None for v in obj.values())
    ref = json.dumps(strip(obj), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert ref == body


@settings(max_examples=100, deadline=None)
@given(records, chains, seqs, st.data())
def test_any_non_canonical_variant_is_rejected(record: AuditRecord, chain: str, seq: int, data) -> None:
    body = encode_record(record, chain, seq)
    obj = json.loads(body)
    variant = data.draw(
        st.sampled_from(
            [
                json.dumps(obj, separators=(", ", ":"), ensure_ascii=False),
                json.dumps(obj, separators=(",", ":"), ensure_ascii=True),
                json.dumps(dict(reversed(list(obj.items()))), separators=(",", ":"), ensure_ascii=False),
                json.dumps({**obj, "model": None}, separators=(",", ":"), sort_keys=True, ensure_ascii=False),
            ]
        )
    ).encode("utf-8")
    if variant != body:
        with pytest.raises(AuditEncodingError):
            decode_record(variant)


def test_known_vector() -> None:
    r = AuditRecord(
        event=EventType.RPC,
        time_ms=1767225600123,
        principal="张三",
        method="/xinserve.v1.InferenceService/Generate",
        outcome="OK",
        latency_us=850,
        detail={"b": 1, "a": "x\n"},
    )
    assert (
        encode_record(r, "node-a", 7)
        == (
            '{"chain":"node-a","detail":{"a":"x\\n","b":1},"event":"rpc","latency_us":850,'
            '"method":"/xinserve.v1.InferenceService/Generate","outcome":"OK","principal":"张三",'
            '"seq":7,"time_ms":1767225600123,"v":1}'
        ).encode()
    )


@pytest.mark.parametrize(
    "kw",
    [
        {"latency_us": 1.5},
        {"latency_us": 2**53},
        {"prompt_tokens": True},
        {"principal": "\ud800"},
        {"prompt_sm3": "ABCD"},
        {"prompt_sm3": "ab\n"},
        {"principal": b"bytes"},
        {"detail": {"Bad-Key": 1}},
        {"detail": {"k": 1.0}},
        {"detail": {"k": None}},
    ],
)
def test_invalid_values_are_refused(kw) -> None:
    with pytest.raises(AuditEncodingError):
        encode_record(AuditRecord(event=EventType.RPC, **kw), "c", 1)


@pytest.mark.parametrize(
    "body",
    [
        b'{"chain":"c","event":"rpc","outcome":"OK","seq":1,"time_ms":1.0,"v":1}',
        b'{"chain":"c","event":"rpc","outcome":"OK","seq":1,"time_ms":1,"v":1,"v":1}',
        b'{"chain":"c","event":"rpc","outcome":"OK","seq":1,"time_ms":1,"v":1,"extra":1}',
        b'{"chain":"c","event":"nope","outcome":"OK","seq":1,"time_ms":1,"v":1}',
        b"\xff",
        b"[]",
    ],
)
def test_malformed_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(AuditEncodingError):
        decode_record(body)
