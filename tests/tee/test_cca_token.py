"""The Arm CCA attestation token parser (cbor2) on Trustee's example token and on hostile input."""

from __future__ import annotations

from typing import Any

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tee.conftest import FIXTURES
from trust.tee.errors import EvidenceParseError, TeeReason
from trust.tee.parsers import parse_cca_token, parse_evidence

TOKEN = (FIXTURES / "cca-example-token.cbor").read_bytes()
COLLECTION = cbor2.loads(TOKEN).value
PLATFORM = COLLECTION[44234]
REALM = COLLECTION[44241]


def test_realm_challenge_and_rim_of_the_example_token() -> None:
    parsed = parse_evidence("cca", TOKEN)
    assert parsed.tee == "cca"
    assert parsed.report_data.hex().startswith("57e979ae2618de0c1ab73144c440d741cf9236dc")
    assert len(parsed.report_data) == 64
    assert parsed.measurement.startswith("ae87fbf7f105e71a7827cb6f0896889c73d2beaf")


def _sign1(claims: Any, tag: int | None = 18, protected: bytes = b"\xa1\x01\x38\x22") -> bytes:
    body = [protected, {}, cbor2.dumps(claims) if claims is not None else None, b"\0" * 96]
    return cbor2.dumps(cbor2.CBORTag(tag, body) if tag is not None else body)


REALM_CLAIMS = {10: b"\x11" * 64, 44238: b"\x22" * 48, 44240: "sha-384"}
PLATFORM_CLAIMS = {265: "http://arm.com/CCA-SSD/1.0.0", 10: b"\x33" * 32}


def _token(platform: Any = None, realm: Any = None, tag: int = 399, drop: int | None = None) -> bytes:
    collection = {44234: platform or _sign1(PLATFORM_CLAIMS), 44241: realm or _sign1(REALM_CLAIMS)}
    if drop is not None:
        del collection[drop]
    return cbor2.dumps(cbor2.CBORTag(tag, collection))


def test_built_token_reads_back() -> None:
    parsed = parse_cca_token(_token())
    assert parsed.report_data == b"\x11" * 64 and parsed.measurement == "22" * 48
    # COSE_Sign1 may also come untagged (RFC 9052 §2)
    assert parse_cca_token(_token(realm=_sign1(REALM_CLAIMS, tag=None))).report_data == b"\x11" * 64


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (TOKEN[:-10], "not well-formed CBOR"),
        (b"", "not well-formed CBOR"),
        (cbor2.dumps({44234: b"", 44241: b""}), "CBOR tag 399"),
        (_token(tag=400), "CBOR tag 399"),
        (cbor2.dumps(cbor2.CBORTag(399, [1, 2])), "collection is not a map"),
        (_token(drop=44241), "no realm token (44241)"),
        (_token(drop=44234), "no platform token (44234)"),
        (_token(realm=_sign1(REALM_CLAIMS, tag=17)), "tag 17, not COSE_Sign1"),
        (_token(realm=_sign1(None)), "realm token has no attached payload"),
        (_token(realm=cbor2.dumps(cbor2.CBORTag(18, [b"", {}, b""]))), "not a COSE_Sign1 array of 4"),
        (_token(realm=_sign1([1, 2])), "realm token payload is not a claims map"),
        (_token(realm=_sign1({**REALM_CLAIMS, 10: b"\x11" * 32})), "challenge (claim 10) must be 64 bytes"),
        (_token(realm=_sign1({10: b"\x11" * 64})), "initial measurement (claim 44238)"),
        (_token(platform=_sign1({10: b""})), "no profile claim (265)"),
        (_token(platform=_sign1(PLATFORM_CLAIMS, protected=None)), "headers or signature have the wrong types"),
    ],
)
def test_hostile_token_is_a_precise_error(token: bytes, message: str) -> None:
    with pytest.raises(EvidenceParseError) as err:
        parse_cca_token(token)
    assert message in err.value.detail
    assert err.value.reason is TeeReason.MALFORMED_EVIDENCE


def test_not_bytes() -> None:
    with pytest.raises(EvidenceParseError, match="must be bytes"):
        parse_cca_token("token")  # type: ignore[arg-type]


_fuzz = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _never_crashes(data: bytes) -> None:
    try:
        parsed = parse_cca_token(data)
    except EvidenceParseError as exc:
        assert exc.detail and exc.reason is TeeReason.MALFORMED_EVIDENCE
    else:
        assert len(parsed.report_data) == 64


@_fuzz
@given(st.binary(max_size=600))
def test_fuzz_random_bytes(data: bytes) -> None:
    _never_crashes(data)


@_fuzz
@given(st.integers(0, len(TOKEN) - 1), st.integers(0, 255), st.integers(0, len(TOKEN)))
def test_fuzz_mutated_example_token(index: int, value: int, cut: int) -> None:
    data = bytearray(TOKEN)
    data[index] = value
    _never_crashes(bytes(data[:cut]))


cbor_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.binary(max_size=70) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.integers(0, 50000), children, max_size=5),
    max_leaves=20,
)


@_fuzz
@given(cbor_values, cbor_values, st.sampled_from([None, 18, 17]))
def test_fuzz_claim_shapes(platform_claims: Any, realm_claims: Any, tag: int | None) -> None:
    _never_crashes(_token(platform=_sign1(platform_claims, tag), realm=_sign1(realm_claims, tag)))


@_fuzz
@given(cbor_values)
def test_fuzz_sign1_shapes(value: Any) -> None:
    _never_crashes(_token(realm=cbor2.dumps(cbor2.CBORTag(18, value))))


@pytest.mark.parametrize(
    "data",
    [
        b"\x5b\x7f\xff\xff\xff\xff\xff\xff\xff",  # a byte string announcing 2^63 bytes
        b"\x81" * 200_000,  # arrays nested past any recursion limit
        b"\xd9\x01\x8f" * 100_000,  # tags nested likewise
        b"\xc1\x1b\xff\xff\xff\xff\xff\xff\xff\xff",  # epoch date far out of range
        b"\xc4\x82\x1b\x7f\xff\xff\xff\xff\xff\xff\xff\x01",  # decimal fraction, huge exponent
    ],
    ids=["huge-length", "deep-arrays", "deep-tags", "date-range", "decimal-exponent"],
)
def test_resource_exhausting_cbor_is_a_precise_error(data: bytes) -> None:
    with pytest.raises(EvidenceParseError, match="not well-formed CBOR"):
        parse_cca_token(data)
