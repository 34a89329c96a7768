"""Hygon CSV certificates (PEK, CEK, PDH, OCA): decode, never verify.

Layout (2084 bytes, little-endian; Hygon's csv-rs ``certs::csv::Certificate``, Apache-2.0, as
Trustee's CSV verifier and the CSV attestation report's signer carry it):

* body (1044 bytes): ``ver u32``, ``firmware {major u8, minor u8}``, ``reserved1 u16``,
  ``pubkey {usage u32, algo u32, key {curve u32, x[72], y[72]}}``, ``uid_size u16``,
  ``user_id[254]``, ``sid[16]``, ``reserved2[608]``;
* two signatures (520 bytes each): ``usage u32``, ``algo u32``, ``r[72]``, ``s[72]``,
  ``reserved[368]``; the usage names the signing key (CEK signs a PEK, OCA co-signs it).

Coordinates and signature values are little-endian in their 72-byte fields; SM2 (curve 3) uses
the first 32. Trustee's evidence JSON carries the same structure as serde writes it
(``{"body": {"ver", "data": {...}}, "sigs": [{"usage", "algo", "signature": {"r", "s"},
"_reserved"}, ...]}``); :func:`pack_json` turns that into the 2084 bytes. Checking the signatures
up to Hygon's root (HRK → HSK → CEK → PEK) is the verifier's job.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from trust.tee.errors import EvidenceParseError

CERT_SIZE = 2084
BODY_SIZE = 1044
SIG_SIZE = 520
ECC_FIELD = 72
UID_FIELD = 254
SID_SIZE = 16
RESERVED2 = 608
SIG_RESERVED = 368
_HEAD = struct.Struct("<IBBHIII")  # ver, major, minor, reserved1, usage, algo, curve
_SIG_HEAD = struct.Struct("<II")

# Key usages of Hygon's (and AMD SEV's) platform keys.
USAGES = {0x13: "HSK", 0x1001: "OCA", 0x1002: "PEK", 0x1003: "PDH", 0x1004: "CEK"}
SM2_CURVE = 3


@dataclass(frozen=True)
class CsvSignature:
    """One signature slot: the signing key's usage (role) and algorithm, r and s (big-endian)."""

    signer: str
    usage: int
    algorithm: int
    r: bytes
    s: bytes


@dataclass(frozen=True)
class CsvCertificate:
    """A decoded CSV certificate.

    Attributes:
        role: ``PEK``, ``CEK``, ``PDH``, ``OCA`` or ``HSK`` from the key usage (``usage:0x...``
            for another value).
        public_key_x, public_key_y: the public key's coordinates, 32 bytes big-endian each (SM2).
        user_id: the SM2 user id (``uid_size`` bytes of ``user_id``).
        raw: the 2084 certificate bytes.
    """

    role: str
    version: int
    firmware: tuple[int, int]
    usage: int
    algorithm: int
    curve: int
    public_key_x: bytes
    public_key_y: bytes
    user_id: bytes
    sid: bytes
    signatures: tuple[CsvSignature, ...]
    raw: bytes


def _role(usage: int) -> str:
    return USAGES.get(usage, f"usage:{usage:#x}")


def _coordinate(field: bytes) -> bytes:
    return field[:32][::-1]


def decode(data: Any, where: str = "certificate") -> CsvCertificate:
    """Decode 2084 certificate bytes. Raises EvidenceParseError (naming ``where``) for anything
    else, or a ``uid_size`` past the user-id field."""
    if not isinstance(data, bytes | bytearray):
        raise EvidenceParseError(f"{where} must be bytes", 0)
    if len(data) != CERT_SIZE:
        raise EvidenceParseError(f"{where} is {CERT_SIZE} bytes, got {len(data)}", min(len(data), CERT_SIZE))
    data = bytes(data)
    version, major, minor, _reserved, usage, algorithm, curve = _HEAD.unpack_from(data, 0)
    at = _HEAD.size
    x, y = data[at : at + ECC_FIELD], data[at + ECC_FIELD : at + 2 * ECC_FIELD]
    at += 2 * ECC_FIELD
    (uid_size,) = struct.unpack_from("<H", data, at)
    at += 2
    if uid_size > UID_FIELD:
        raise EvidenceParseError(f"{where}: uid_size {uid_size} exceeds the {UID_FIELD}-byte user id", at - 2)
    user_id = data[at : at + uid_size]
    at += UID_FIELD
    sid = data[at : at + SID_SIZE]
    signatures = []
    for i in range(2):
        off = BODY_SIZE + i * SIG_SIZE
        sig_usage, sig_algo = _SIG_HEAD.unpack_from(data, off)
        r = data[off + 8 : off + 8 + ECC_FIELD]
        s = data[off + 8 + ECC_FIELD : off + 8 + 2 * ECC_FIELD]
        signatures.append(CsvSignature(_role(sig_usage), sig_usage, sig_algo, _coordinate(r), _coordinate(s)))
    return CsvCertificate(
        role=_role(usage),
        version=version,
        firmware=(major, minor),
        usage=usage,
        algorithm=algorithm,
        curve=curve,
        public_key_x=_coordinate(x),
        public_key_y=_coordinate(y),
        user_id=user_id,
        sid=sid,
        signatures=tuple(signatures),
        raw=data,
    )


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise EvidenceParseError(f"{where} must be an object")
    return value


def _get(obj: dict[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise EvidenceParseError(f"{where}.{key} is missing")
    return obj[key]


def _uint(obj: dict[str, Any], key: str, where: str, bits: int) -> int:
    value = _get(obj, key, where)
    if type(value) is not int or not 0 <= value < 1 << bits:
        raise EvidenceParseError(f"{where}.{key} must be an unsigned {bits}-bit integer")
    return value


def _byte_array(obj: dict[str, Any], key: str, where: str, size: int) -> bytes:
    value = _get(obj, key, where)
    if not isinstance(value, list) or not all(type(v) is int and 0 <= v <= 255 for v in value):
        raise EvidenceParseError(f"{where}.{key} must be a list of byte values")
    if len(value) != size:
        raise EvidenceParseError(f"{where}.{key} must hold {size} bytes, holds {len(value)}")
    return bytes(value)


def pack_json(value: Any, where: str) -> bytes:
    """The 2084 bytes of a certificate in Trustee's (serde) JSON form. Raises EvidenceParseError
    naming the JSON path (``where`` and below) of the first field that is missing or malformed."""
    cert = _obj(value, where)
    body = _obj(_get(cert, "body", where), f"{where}.body")
    w = f"{where}.body.data"
    data = _obj(_get(body, "data", f"{where}.body"), w)
    firmware = _obj(_get(data, "firmware", w), f"{w}.firmware")
    pubkey = _obj(_get(data, "pubkey", w), f"{w}.pubkey")
    key = _obj(_get(pubkey, "key", f"{w}.pubkey"), f"{w}.pubkey.key")
    out = _HEAD.pack(
        _uint(body, "ver", f"{where}.body", 32),
        _uint(firmware, "major", f"{w}.firmware", 8),
        _uint(firmware, "minor", f"{w}.firmware", 8),
        _uint(data, "reserved1", w, 16),
        _uint(pubkey, "usage", f"{w}.pubkey", 32),
        _uint(pubkey, "algo", f"{w}.pubkey", 32),
        _uint(key, "g", f"{w}.pubkey.key", 32),
    )
    out += _byte_array(key, "x", f"{w}.pubkey.key", ECC_FIELD) + _byte_array(key, "y", f"{w}.pubkey.key", ECC_FIELD)
    out += struct.pack("<H", _uint(data, "uid_size", w, 16))
    out += _byte_array(data, "user_id", w, UID_FIELD) + _byte_array(data, "sid", w, SID_SIZE)
    out += _byte_array(data, "reserved2", w, RESERVED2)
    sigs = _get(cert, "sigs", where)
    if not isinstance(sigs, list) or len(sigs) != 2:
        raise EvidenceParseError(f"{where}.sigs must be a list of 2 signatures")
    for i, sig_value in enumerate(sigs):
        ws = f"{where}.sigs[{i}]"
        sig = _obj(sig_value, ws)
        rs = _obj(_get(sig, "signature", ws), f"{ws}.signature")
        out += _SIG_HEAD.pack(_uint(sig, "usage", ws, 32), _uint(sig, "algo", ws, 32))
        out += _byte_array(rs, "r", f"{ws}.signature", ECC_FIELD) + _byte_array(rs, "s", f"{ws}.signature", ECC_FIELD)
        out += _byte_array(sig, "_reserved", ws, SIG_RESERVED)
    return out


def decode_json(value: Any, where: str) -> CsvCertificate:
    """:func:`decode` of :func:`pack_json`."""
    return decode(pack_json(value, where), where)
