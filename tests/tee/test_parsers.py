"""Parsers on real recorded evidence (Trustee test data) and on hostile input (hypothesis)."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tee.conftest import FIXTURES
from trust.tee.errors import EvidenceParseError, TeeReason
from trust.tee.parsers import (
    parse_csv_evidence,
    parse_evidence,
    parse_sample_evidence,
    parse_snp_report,
    parse_tdx_quote,
)

TDX = (FIXTURES / "tdx_quote_4.dat").read_bytes()
SNP = (FIXTURES / "test-report.bin").read_bytes()
CSV = (FIXTURES / "csv_evidence.json").read_bytes()


def test_tdx_quote_v4_report_data_and_mrtd() -> None:
    parsed = parse_tdx_quote(TDX)
    assert parsed.tee == "tdx" and parsed.version == 4
    # REPORTDATA sits 520 bytes into the TD report body, which starts after the 48-byte header.
    assert parsed.report_data == TDX[48 + 520 : 48 + 584]
    assert parsed.measurement == TDX[48 + 136 : 48 + 184].hex()
    assert len(parsed.report_data) == 64


def test_snp_report_report_data_and_measurement() -> None:
    parsed = parse_snp_report(SNP)
    assert parsed.tee == "snp" and parsed.version == 2
    assert parsed.report_data.hex().startswith("ec6c52d7533cc2c4f45be7849cf112ab")
    assert parsed.measurement == SNP[0x90:0xC0].hex()


def test_csv_evidence_fields_after_anonce() -> None:
    parsed = parse_csv_evidence(CSV)
    assert parsed.tee == "csv" and parsed.version == 1
    # Trustee's recorded CSV report was taken with all-zero report data.
    assert parsed.report_data == bytes(64)
    assert parsed.measurement == "ae2a2cf1f41a485fa37bf9ae92f678783c59fbc79de7b5d237743d58f5538034"


def test_dispatch_by_tee_name() -> None:
    assert parse_evidence("tdx", TDX).tee == "tdx"
    with pytest.raises(EvidenceParseError):
        parse_evidence("sgx", TDX)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda q: q[:47], "header"),
        (lambda q: q[:600], "truncated"),
        (lambda q: struct.pack("<H", 3) + q[2:], "version 3"),
        (lambda q: q[:4] + struct.pack("<I", 0) + q[8:], "tee_type"),
        (lambda q: q[:632] + struct.pack("<I", 1 << 30) + q[636:], "signature data truncated"),
    ],
)
def test_tdx_quote_damage_is_a_precise_error(mutate, message: str) -> None:
    with pytest.raises(EvidenceParseError) as err:
        parse_tdx_quote(mutate(TDX))
    assert message in err.value.detail
    assert err.value.reason is TeeReason.MALFORMED_EVIDENCE


def test_snp_wrong_size_and_version() -> None:
    with pytest.raises(EvidenceParseError, match=r"0x4a0|1184"):
        parse_snp_report(SNP[:-1])
    with pytest.raises(EvidenceParseError, match="version 9"):
        parse_snp_report(struct.pack("<I", 9) + SNP[4:])


def test_csv_v2_and_bad_shapes() -> None:
    doc = json.loads(CSV)
    doc["attestation_report"]["magic"] = list(b"ATTESTATION_EXT\0")
    doc["attestation_report"]["flags"] = 1
    with pytest.raises(EvidenceParseError, match="v2"):
        parse_csv_evidence(json.dumps(doc).encode())
    doc = json.loads(CSV)
    doc["attestation_report"]["data"] = doc["attestation_report"]["data"][:100]
    with pytest.raises(EvidenceParseError, match="4096"):
        parse_csv_evidence(json.dumps(doc).encode())
    doc = json.loads(CSV)
    doc["attestation_report"]["data"][0] = 256
    with pytest.raises(EvidenceParseError, match="byte values"):
        parse_csv_evidence(json.dumps(doc).encode())
    with pytest.raises(EvidenceParseError, match="JSON"):
        parse_csv_evidence(b"\xff\xfe")
    with pytest.raises(EvidenceParseError, match="object"):
        parse_csv_evidence(b"[1]")


_fuzz = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _never_crashes(parser, data: bytes) -> None:
    try:
        parsed = parser(data)
    except EvidenceParseError as exc:
        assert exc.detail and exc.reason is TeeReason.MALFORMED_EVIDENCE
    else:
        assert len(parsed.report_data) == 64


@_fuzz
@given(st.binary(max_size=6000))
def test_fuzz_tdx_random(data: bytes) -> None:
    _never_crashes(parse_tdx_quote, data)


@_fuzz
@given(st.integers(0, len(TDX) - 1), st.integers(0, 255), st.integers(0, len(TDX)))
def test_fuzz_tdx_mutated(index: int, value: int, cut: int) -> None:
    data = bytearray(TDX)
    data[index] = value
    _never_crashes(parse_tdx_quote, bytes(data[:cut]))


@_fuzz
@given(st.binary(min_size=1180, max_size=1190))
def test_fuzz_snp(data: bytes) -> None:
    _never_crashes(parse_snp_report, data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-300, 300) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


@_fuzz
@given(json_values)
def test_fuzz_csv_json_shapes(value) -> None:
    _never_crashes(parse_csv_evidence, json.dumps({"attestation_report": value}).encode())


@_fuzz
@given(st.binary(max_size=300))
def test_fuzz_csv_and_sample_bytes(data: bytes) -> None:
    _never_crashes(parse_csv_evidence, data)
    _never_crashes(parse_sample_evidence, data)


@_fuzz
@given(json_values)
def test_fuzz_sample_json(value) -> None:
    _never_crashes(parse_sample_evidence, json.dumps({"report_data": value}).encode())
