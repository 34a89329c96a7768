"""The CSV certificate chain of Trustee's recorded Hygon CSV evidence, decoded into the parsed
evidence view (trust.tee.csv_certificate); hostile chains are precise errors, never crashes."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tee.conftest import FIXTURES
from trust.tee import csv_certificate, csv_guest
from trust.tee.errors import EvidenceParseError, TeeReason
from trust.tee.parsers import parse_csv_evidence, parse_evidence

DOC = json.loads((FIXTURES / "csv_evidence.json").read_bytes())
PAGE = bytes(DOC["attestation_report"]["data"])
REPORT_PEK = PAGE[csv_guest.SIGNER_OFFSET : csv_guest.SIGNER_OFFSET + csv_guest.PEK_CERT_SIZE]

# SM2 curve (GB/T 32918.5): y^2 = x^3 + ax + b over p.
SM2_P = 0xFFFFFFFEFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF00000000FFFFFFFFFFFFFFFF
SM2_A = SM2_P - 3
SM2_B = 0x28E9FA9E9D9F5E344D5A9E4BCF6509A7F39789F515AB8F92DDBCBD414D940E93


def _evidence(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def test_recorded_pek_is_decoded() -> None:
    parsed = parse_evidence("csv", _evidence(DOC))
    assert [c.role for c in parsed.certificates] == ["PEK"]
    pek = parsed.certificates[0]
    assert pek.usage == 0x1002 and pek.firmware == (1, 3) and pek.curve == csv_certificate.SM2_CURVE
    assert pek.user_id == b"HYGON-SSD-PEK"
    assert [(s.signer, s.usage) for s in pek.signatures] == [("CEK", 0x1004), ("OCA", 0x1001)]
    # The coordinates are decoded in the right byte order only if they land on the SM2 curve.
    x, y = int.from_bytes(pek.public_key_x, "big"), int.from_bytes(pek.public_key_y, "big")
    assert (y * y - (x**3 + SM2_A * x + SM2_B)) % SM2_P == 0
    # The JSON chain's PEK is byte for byte the one the report's signer carries.
    assert pek.raw == REPORT_PEK


def test_without_cert_chain_the_reports_own_pek_is_decoded() -> None:
    doc = {k: v for k, v in DOC.items() if k != "cert_chain"}
    parsed = parse_csv_evidence(_evidence(doc))
    assert [c.role for c in parsed.certificates] == ["PEK"]
    assert parsed.certificates[0].raw == REPORT_PEK


def test_without_cert_chain_a_signer_that_is_no_pek_is_not_reported() -> None:
    doc = {k: v for k, v in DOC.items() if k != "cert_chain"}
    page = bytearray(PAGE)
    page[csv_guest.SIGNER_OFFSET + 8 : csv_guest.SIGNER_OFFSET + 12] = (0x1003).to_bytes(4, "little")
    doc["attestation_report"] = {**DOC["attestation_report"], "data": list(page)}
    assert parse_csv_evidence(_evidence(doc)).certificates == ()


def _as(usage: int) -> dict[str, Any]:
    cert = copy.deepcopy(DOC["cert_chain"]["pek"])
    cert["body"]["data"]["pubkey"]["usage"] = usage
    return cert


def test_hsk_cek_chain_decodes_the_cek() -> None:
    doc = copy.deepcopy(DOC)
    doc["cert_chain"]["hsk_cek"] = {"hsk": {}, "cek": _as(0x1004)}
    parsed = parse_csv_evidence(_evidence(doc))
    assert [c.role for c in parsed.certificates] == ["PEK", "CEK"]


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


KEY = ("cert_chain", "pek", "body", "data", "pubkey", "key")


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("cert_chain",), [1], "cert_chain must be an object"),
        (("cert_chain",), {}, "cert_chain.pek is missing"),
        (("cert_chain", "pek"), "x", "cert_chain.pek must be an object"),
        ((*KEY, "x"), [0] * 71, "cert_chain.pek.body.data.pubkey.key.x must hold 72 bytes, holds 71"),
        ((*KEY, "y"), [0] * 71 + [256], "cert_chain.pek.body.data.pubkey.key.y must be a list of byte values"),
        ((*KEY, "g"), -1, "cert_chain.pek.body.data.pubkey.key.g must be an unsigned 32-bit integer"),
        (("cert_chain", "pek", "body", "data", "firmware", "major"), 256, "firmware.major must be an unsigned 8-bit"),
        (("cert_chain", "pek", "body", "data", "uid_size"), 300, "uid_size 300 exceeds the 254-byte user id"),
        (("cert_chain", "pek", "body", "data", "pubkey", "usage"), 0x1004, "cert_chain.pek has key usage CEK, not PEK"),
        (("cert_chain", "pek", "sigs"), [], "cert_chain.pek.sigs must be a list of 2 signatures"),
        (("cert_chain", "pek", "sigs", 1, "signature"), None, "cert_chain.pek.sigs[1].signature must be an object"),
        (("cert_chain", "hsk_cek"), {"cek": {}}, "cert_chain.hsk_cek must be an object with hsk and cek"),
        (("cert_chain", "hsk_cek"), {"hsk": {}, "cek": {}}, "cert_chain.hsk_cek.cek.body is missing"),
        (("cert_chain", "hsk_cek"), {"hsk": {}, "cek": _as(0x1002)}, "cert_chain.hsk_cek.cek has key usage PEK"),
    ],
)
def test_hostile_chain_is_a_precise_error(path: tuple[Any, ...], value: Any, message: str) -> None:
    with pytest.raises(EvidenceParseError) as err:
        parse_csv_evidence(_evidence(_set(DOC, path, value)))
    assert message in err.value.detail
    assert err.value.reason is TeeReason.MALFORMED_EVIDENCE


def test_decode_refuses_other_sizes_and_types() -> None:
    with pytest.raises(EvidenceParseError, match="2084 bytes, got 2083"):
        csv_certificate.decode(REPORT_PEK[:-1])
    with pytest.raises(EvidenceParseError, match="must be bytes"):
        csv_certificate.decode("x" * 2084)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list) and node:
        for i in {0, len(node) - 1}:
            out += _paths(node[i], (*prefix, i))
    return out


CHAIN_PATHS = _paths({"cert_chain": DOC["cert_chain"]})
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)
_fuzz = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_fuzz
@given(st.sampled_from(CHAIN_PATHS), json_values)
def test_fuzz_chain_fields(path: tuple[Any, ...], value: Any) -> None:
    try:
        parsed = parse_csv_evidence(_evidence(_set(DOC, path, value)))
    except EvidenceParseError as exc:
        assert exc.detail and exc.reason is TeeReason.MALFORMED_EVIDENCE
    else:
        assert parsed.certificates and parsed.certificates[0].role == "PEK"


@_fuzz
@given(st.binary(min_size=2084, max_size=2084) | st.binary(max_size=3000))
def test_fuzz_certificate_bytes(data: bytes) -> None:
    try:
        cert = csv_certificate.decode(data)
    except EvidenceParseError as exc:
        assert exc.detail and exc.offset >= 0
    else:
        assert len(cert.public_key_x) == 32 and len(cert.signatures) == 2 and len(cert.user_id) <= 254


def test_without_cert_chain_an_undecodable_signer_is_not_reported() -> None:
    doc = {k: v for k, v in DOC.items() if k != "cert_chain"}
    page = bytearray(PAGE)
    uid_size_at = csv_guest.SIGNER_OFFSET + 20 + 2 * 72  # after ver, firmware, reserved1, usage, algo, curve, x, y
    page[uid_size_at : uid_size_at + 2] = (300).to_bytes(2, "little")
    doc["attestation_report"] = {**DOC["attestation_report"], "data": list(page)}
    parsed = parse_csv_evidence(_evidence(doc))
    assert parsed.certificates == () and parsed.report_data == bytes(64)
