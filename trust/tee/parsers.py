"""Read report data and measurements out of TEE evidence. Never verifies anything.

Formats: Intel TDX quote v4/v5 (Intel DCAP "Quote Library" ABI: 48-byte header, TD report body),
AMD SEV-SNP attestation report (SEV-SNP ABI spec, ``ATTESTATION_REPORT``, 0x4A0 bytes), Hygon CSV
evidence JSON (Trustee ``deps/verifier``, with its PEK/CEK certificates decoded by
:mod:`trust.tee.csv_certificate`), the Arm CCA attestation token (RMM specification ``RMM
v1.0``, §A7.2: a CMW collection, CBOR tag 399, of the platform and realm tokens, each a COSE_Sign1,
RFC 9052; decoded with cbor2), and the ``sample``/recorded JSON of
:mod:`trust.tee.recorded`. Every parser raises :class:`EvidenceParseError` (with the offset where it
stopped) on hostile input and nothing else; the verification of signatures and certificate chains is
the verifier's job (a KBS, or the client's verifier).
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cbor2

from trust.tee import csv_certificate, csv_guest
from trust.tee.csv_certificate import CsvCertificate
from trust.tee.errors import EvidenceParseError
from trust.tee.evidence import REPORT_DATA_SIZE, TEE_CCA, TEE_CSV, TEE_SAMPLE, TEE_SNP, TEE_TDX

MAX_EVIDENCE = 1 << 20

TDX_HEADER_SIZE = 48
TDX_TEE_TYPE = 0x81
TDX10_BODY_SIZE = 584
TDX_REPORT_DATA_OFFSET = 520  # within the TD report body
SNP_REPORT_SIZE = 0x4A0
SNP_REPORT_DATA = slice(0x50, 0x90)
SNP_MEASUREMENT = slice(0x90, 0xC0)
CCA_COLLECTION_TAG = 399
CCA_PLATFORM_TOKEN = 44234
CCA_REALM_TOKEN = 44241
COSE_SIGN1_TAG = 18
EAT_CHALLENGE = 10
CCA_REALM_RIM = 44238
CCA_REALM_HASH_ALGORITHM = 44240
CCA_PLATFORM_PROFILE = 265


@dataclass(frozen=True)
class ParsedEvidence:
    """What a parser read: the TEE, the 64 report-data bytes and the launch measurement (hex).

    ``certificates``: the certificates the evidence carries, decoded, leaf first (CSV: the PEK,
    then the CEK when Trustee's ``cert_chain.hsk_cek`` is present); empty for other TEEs."""

    tee: str
    version: int
    report_data: bytes
    measurement: str
    recorded: bool = False
    certificates: tuple[CsvCertificate, ...] = ()


def _bytes(evidence: Any) -> bytes:
    if not isinstance(evidence, bytes | bytearray):
        raise EvidenceParseError("evidence must be bytes", 0)
    if len(evidence) > MAX_EVIDENCE:
        raise EvidenceParseError(f"evidence larger than {MAX_EVIDENCE} bytes", MAX_EVIDENCE)
    return bytes(evidence)


def parse_tdx_quote(quote: bytes) -> ParsedEvidence:
    """TDX quote v4 or v5: header (version u16, att_key_type u16, tee_type u32 = 0x81, ...) then
    the TD report body (v4) or ``{type u16, size u32, body}`` (v5). Reads MRTD and REPORTDATA."""
    data = _bytes(quote)
    if len(data) < TDX_HEADER_SIZE:
        raise EvidenceParseError(f"a TDX quote header is {TDX_HEADER_SIZE} bytes, got {len(data)}", len(data))
    version, _key_type, tee_type = struct.unpack_from("<HHI", data, 0)
    if tee_type != TDX_TEE_TYPE:
        raise EvidenceParseError(f"quote tee_type is {tee_type:#x}, not TDX (0x81)", 4)
    if version == 4:
        body_at = TDX_HEADER_SIZE
    elif version == 5:
        if len(data) < TDX_HEADER_SIZE + 6:
            raise EvidenceParseError("TDX quote v5 has no body descriptor", len(data))
        body_type, body_size = struct.unpack_from("<HI", data, TDX_HEADER_SIZE)
        if body_type not in (2, 3) or body_size < TDX10_BODY_SIZE:
            raise EvidenceParseError(f"TDX quote v5 body type {body_type} / size {body_size} is not a TD report", 48)
        body_at = TDX_HEADER_SIZE + 6
    else:
        raise EvidenceParseError(f"TDX quote version {version} is not 4 or 5", 0)
    end = body_at + TDX10_BODY_SIZE
    if len(data) < end + 4:
        raise EvidenceParseError(f"TDX quote truncated: {len(data)} bytes, body ends at {end}", len(data))
    sig_len = struct.unpack_from("<I", data, end)[0]
    if len(data) < end + 4 + sig_len:
        raise EvidenceParseError(f"TDX quote signature data truncated ({sig_len} bytes announced)", end)
    mrtd = data[body_at + 136 : body_at + 184]
    rd = data[body_at + TDX_REPORT_DATA_OFFSET : body_at + TDX_REPORT_DATA_OFFSET + REPORT_DATA_SIZE]
    return ParsedEvidence(TEE_TDX, version, rd, mrtd.hex())


def parse_snp_report(report: bytes) -> ParsedEvidence:
    """SEV-SNP ATTESTATION_REPORT (0x4A0 bytes, versions 2 to 5): REPORT_DATA and MEASUREMENT."""
    data = _bytes(report)
    if len(data) != SNP_REPORT_SIZE:
        raise EvidenceParseError(
            f"an SNP report is {SNP_REPORT_SIZE} bytes, got {len(data)}", min(len(data), SNP_REPORT_SIZE)
        )
    version = struct.unpack_from("<I", data, 0)[0]
    if not 2 <= version <= 5:
        raise EvidenceParseError(f"SNP report version {version} is not 2 to 5", 0)
    return ParsedEvidence(TEE_SNP, version, data[SNP_REPORT_DATA], data[SNP_MEASUREMENT].hex())


def _byte_list(value: Any, what: str, size: int | None = None) -> bytes:
    if not isinstance(value, list) or not all(type(v) is int and 0 <= v <= 255 for v in value):
        raise EvidenceParseError(f"{what} must be a list of byte values")
    if size is not None and len(value) != size:
        raise EvidenceParseError(f"{what} must hold {size} bytes, holds {len(value)}")
    return bytes(value)


def _json_object(data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise EvidenceParseError("evidence is not UTF-8 JSON", 0) from None
    if not isinstance(doc, dict):
        raise EvidenceParseError("evidence JSON must be an object", 0)
    return doc


def _csv_certificates(doc: dict[str, Any], page: bytes) -> tuple[CsvCertificate, ...]:
    """Trustee's ``cert_chain {pek, hsk_cek: {hsk, cek} | null}``, PEK and CEK decoded (the HSK is
    Hygon's CA format, the verifier's to check). Without ``cert_chain`` (xinserve's own CSV
    provider), the PEK the report's signer carries, if it decodes and its key usage says PEK
    (nothing otherwise: the chain is optional in the evidence)."""
    chain = doc.get("cert_chain")
    if chain is None:
        start = csv_guest.SIGNER_OFFSET
        try:
            embedded = csv_certificate.decode(page[start : start + csv_guest.PEK_CERT_SIZE], "the report's PEK")
        except EvidenceParseError:
            return ()
        return (embedded,) if embedded.role == "PEK" else ()
    if not isinstance(chain, dict):
        raise EvidenceParseError("cert_chain must be an object")
    if "pek" not in chain:
        raise EvidenceParseError("cert_chain.pek is missing")
    pek = csv_certificate.decode_json(chain["pek"], "cert_chain.pek")
    if pek.role != "PEK":
        raise EvidenceParseError(f"cert_chain.pek has key usage {pek.role}, not PEK")
    hsk_cek = chain.get("hsk_cek")
    if hsk_cek is None:
        return (pek,)
    if not isinstance(hsk_cek, dict) or not isinstance(hsk_cek.get("hsk"), dict) or "cek" not in hsk_cek:
        raise EvidenceParseError("cert_chain.hsk_cek must be an object with hsk and cek")
    cek = csv_certificate.decode_json(hsk_cek["cek"], "cert_chain.hsk_cek.cek")
    if cek.role != "CEK":
        raise EvidenceParseError(f"cert_chain.hsk_cek.cek has key usage {cek.role}, not CEK")
    return (pek, cek)


def parse_csv_evidence(evidence: bytes) -> ParsedEvidence:
    """Trustee's Hygon CSV evidence JSON: ``attestation_report {magic[16], flags, data[4096]}``
    and ``cert_chain`` (see :func:`_csv_certificates`).

    Version 1 reports (magic all zero, or ``ATTESTATION_EXT`` with flags 0) only; the extended
    (v2) report is refused with a precise error."""
    doc = _json_object(_bytes(evidence))
    report = doc.get("attestation_report")
    if not isinstance(report, dict):
        raise EvidenceParseError("CSV evidence has no attestation_report object")
    magic = _byte_list(report.get("magic"), "attestation_report.magic", 16)
    flags = report.get("flags")
    if type(flags) is not int:
        raise EvidenceParseError("attestation_report.flags must be an integer")
    if magic == b"ATTESTATION_EXT\0" and flags == 1:
        raise EvidenceParseError("extended (v2) CSV attestation reports are not supported")
    if magic not in (b"\0" * 16, b"ATTESTATION_EXT\0") or flags != 0:
        raise EvidenceParseError("attestation_report.magic/flags are not a CSV v1 report")
    page = _byte_list(report.get("data"), "attestation_report.data", csv_guest.PAGE)
    parsed = csv_guest.parse_report(page)
    return ParsedEvidence(
        TEE_CSV, 1, parsed.report_data, parsed.measure.hex(), certificates=_csv_certificates(doc, page)
    )


def parse_sample_evidence(evidence: bytes) -> ParsedEvidence:
    """The ``sample`` evidence of :mod:`trust.tee.recorded` (and Trustee's sample attester)."""
    doc = _json_object(_bytes(evidence))
    rd = doc.get("report_data")
    if not isinstance(rd, str):
        raise EvidenceParseError("sample evidence has no report_data string")
    try:
        data = base64.b64decode(rd, validate=True)
    except (binascii.Error, ValueError):
        raise EvidenceParseError("sample report_data is not base64") from None
    if len(data) != REPORT_DATA_SIZE:
        raise EvidenceParseError(f"sample report_data is {len(data)} bytes, not 64")
    return ParsedEvidence(TEE_SAMPLE, 1, data, "", recorded=doc.get("recorded") is True)


def _cbor(data: bytes, what: str) -> Any:
    try:
        return cbor2.loads(data)
    except (cbor2.CBORError, ValueError, TypeError, LookupError, OverflowError, RecursionError, MemoryError, EOFError):
        # semantic tags (dates, bignums, sets, ...) may raise more than cbor2's own errors
        raise EvidenceParseError(f"{what} is not well-formed CBOR", 0) from None


def _cose_sign1_payload(token: Any, what: str) -> Mapping[Any, Any]:
    """The claims map inside a COSE_Sign1 (RFC 9052 §4.2: tag 18 or untagged
    ``[protected bstr, unprotected map, payload bstr, signature bstr]``). Nothing is verified."""
    if not isinstance(token, bytes):
        raise EvidenceParseError(f"{what} must be a CBOR byte string")
    sign1 = _cbor(token, what)
    if isinstance(sign1, cbor2.CBORTag):
        if sign1.tag != COSE_SIGN1_TAG:
            raise EvidenceParseError(f"{what} has CBOR tag {sign1.tag}, not COSE_Sign1 (18)")
        sign1 = sign1.value
    if not isinstance(sign1, list | tuple) or len(sign1) != 4:
        raise EvidenceParseError(f"{what} is not a COSE_Sign1 array of 4")
    protected, unprotected, payload, signature = sign1
    if not isinstance(protected, bytes) or not isinstance(unprotected, Mapping) or not isinstance(signature, bytes):
        raise EvidenceParseError(f"{what} COSE_Sign1 headers or signature have the wrong types")
    if not isinstance(payload, bytes):
        raise EvidenceParseError(f"{what} has no attached payload")
    claims = _cbor(payload, f"{what} payload")
    if not isinstance(claims, Mapping):
        raise EvidenceParseError(f"{what} payload is not a claims map")
    return claims


def parse_cca_token(token: bytes) -> ParsedEvidence:
    """Arm CCA attestation token: CBOR tag 399 over ``{44234: platform token, 44241: realm
    token}``. Reads the realm token's challenge (claim 10, the 64 report-data bytes) and its
    initial measurement (RIM, claim 44238); checks that the platform token is a COSE_Sign1 with a
    claims map. Signatures and the platform/realm binding are the verifier's."""
    top = _cbor(_bytes(token), "CCA token")
    if not isinstance(top, cbor2.CBORTag) or top.tag != CCA_COLLECTION_TAG:
        raise EvidenceParseError(f"a CCA token is CBOR tag {CCA_COLLECTION_TAG} (CMW collection)", 0)
    collection = top.value
    if not isinstance(collection, Mapping):
        raise EvidenceParseError("the CCA token collection is not a map")
    for key, name in ((CCA_PLATFORM_TOKEN, "platform"), (CCA_REALM_TOKEN, "realm")):
        if key not in collection:
            raise EvidenceParseError(f"the CCA token has no {name} token ({key})")
    platform = _cose_sign1_payload(collection[CCA_PLATFORM_TOKEN], "CCA platform token")
    realm = _cose_sign1_payload(collection[CCA_REALM_TOKEN], "CCA realm token")
    if not isinstance(platform.get(CCA_PLATFORM_PROFILE), str):
        raise EvidenceParseError("CCA platform token has no profile claim (265)")
    challenge = realm.get(EAT_CHALLENGE)
    if not isinstance(challenge, bytes) or len(challenge) != REPORT_DATA_SIZE:
        raise EvidenceParseError(f"CCA realm challenge (claim 10) must be {REPORT_DATA_SIZE} bytes")
    rim = realm.get(CCA_REALM_RIM)
    if not isinstance(rim, bytes) or not 32 <= len(rim) <= 64:
        raise EvidenceParseError("CCA realm initial measurement (claim 44238) must be 32 to 64 bytes")
    return ParsedEvidence(TEE_CCA, 1, challenge, rim.hex())


PARSERS = {
    TEE_TDX: parse_tdx_quote,
    TEE_SNP: parse_snp_report,
    TEE_CSV: parse_csv_evidence,
    TEE_CCA: parse_cca_token,
    TEE_SAMPLE: parse_sample_evidence,
}


def parse_evidence(tee: str, evidence: bytes) -> ParsedEvidence:
    """Dispatch on the KBS ``tee`` name; EvidenceParseError for an unknown TEE or bad evidence."""
    parser = PARSERS.get(tee) if isinstance(tee, str) else None
    if parser is None:
        raise EvidenceParseError(f"no parser for TEE {str(tee)[:20]!r}")
    return parser(evidence)
