"""SM2 signatures (GB/T 32918.2) with the GM/T 0009 default distinguishing ID, pinned.

The curve arithmetic and signing come from ``gmssl-pyx`` (static GmSSL 3.x); key encodings are parsed
and written here with ``asn1crypto``, strictly, because pyca/cryptography refuses SM2 keys; the
password envelope of an encrypted private key is :mod:`trust.pkcs8`. See docs/signing.md for the
library comparison.

Fail-closed rules of :meth:`Sm2PublicKey.verify`: the signature must be strict DER
``SEQUENCE { INTEGER r, INTEGER s }`` with ``1 <= r, s < n`` and nothing after it; any exception of
the library, any ``False``, any malformed input becomes :class:`InvalidSignature`.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from typing import Any

import gmssl_pyx
from asn1crypto import algos, core, keys
from asn1crypto import pem as asn1_pem

from trust import pkcs8
from trust._curve import SM2P256V1
from trust.errors import InvalidSignature, KeyFormatError
from trust.pkcs8 import DEFAULT_KDF_ITERATIONS
from trust.sm3 import sm3

#: GM/T 0009-2012 default distinguishing ID. Pinned: never read from an artifact or an option.
DEFAULT_ID = b"1234567812345678"

OID_EC_PUBLIC_KEY = "1.2.840.10045.2.1"
OID_SM2_CURVE = "1.2.156.10197.1.301"

_CURVE = SM2P256V1

# asn1crypto needs the SM2 curve's key size to build ECPrivateKey structures.
if OID_SM2_CURVE not in keys.NamedCurve._map:
    keys.NamedCurve.register("sm2p256v1", OID_SM2_CURVE, 32)
_N = _CURVE.n


def _strict_load(spec: type[core.Asn1Value], der: bytes, what: str) -> Any:
    """Parse ``der`` as ``spec``: no trailing bytes, and it must be the canonical DER encoding."""
    try:
        value = spec.load(der, strict=True)
        _ = value.native  # forces a full parse of every nested value
        if value.dump(force=True) != der:
            raise KeyFormatError(f"{what} is not canonical DER")
    except KeyFormatError:
        raise
    except Exception:
        raise KeyFormatError(f"{what} is not valid DER") from None
    return value


def _pem_unarmor(data: bytes, allowed: tuple[str, ...]) -> tuple[str, bytes]:
    try:
        if not asn1_pem.detect(data):
            raise KeyFormatError(f"not a PEM file (expected {' or '.join(allowed)})")
        label, _headers, der = asn1_pem.unarmor(data)
    except KeyFormatError:
        raise
    except Exception:
        raise KeyFormatError("malformed PEM") from None
    if label not in allowed:
        raise KeyFormatError(f"PEM label {label!r} is not {' or '.join(allowed)}")
    if data.count(b"-----BEGIN") != 1:
        raise KeyFormatError("PEM file holds more than one object")
    return label, der


def _check_point(raw: bytes) -> bytes:
    """Validate an uncompressed SEC1 point; return X||Y (64 bytes)."""
    if len(raw) != 65 or raw[0] != 0x04:
        raise KeyFormatError("SM2 public key must be an uncompressed point (04||X||Y, 65 bytes)")
    x = int.from_bytes(raw[1:33], "big")
    y = int.from_bytes(raw[33:], "big")
    if not _CURVE.on_curve(x, y):
        raise KeyFormatError("SM2 public key point is not on the sm2p256v1 curve")
    # Cofactor 1: every finite point of the curve is in the prime-order group; (0,0) is not on it.
    return raw[1:]


def _check_algorithm(alg: Any) -> None:
    oid = alg["algorithm"].dotted
    if oid != OID_EC_PUBLIC_KEY:
        raise KeyFormatError(f"key algorithm {oid} is not id-ecPublicKey")
    params = alg["parameters"]
    if params.name != "named":
        raise KeyFormatError("SM2 key must name its curve (explicit parameters are refused)")
    curve = params.chosen.dotted
    if curve != OID_SM2_CURVE:
        raise KeyFormatError(f"curve {curve} is not SM2 ({OID_SM2_CURVE})")


def parse_der_signature(signature: bytes) -> tuple[int, int]:
    """Strictly parse a DER SM2 signature into (r, s); raise :class:`InvalidSignature` otherwise.

    asn1crypto's ``DSASignature`` (``SEQUENCE { INTEGER r, INTEGER s }``), loaded strictly and
    re-encoded: anything but the one canonical DER encoding (long-form lengths, non-minimal or
    negative integers, trailing bytes) is refused, and ``1 <= r, s < n``.
    """
    if not isinstance(signature, bytes | bytearray) or len(signature) < 8 or len(signature) > 129:
        raise InvalidSignature("signature is not DER SEQUENCE { r, s }")
    sig = bytes(signature)
    try:
        value = algos.DSASignature.load(sig, strict=True)
        r, s = value["r"].native, value["s"].native
        canonical = value.dump(force=True) == sig
    except ValueError as exc:
        if sig[:1] == b"\x30" and str(exc).startswith("Extra data"):
            raise InvalidSignature("trailing bytes after the signature") from None
        if sig[:1] == b"\x30" and str(exc).startswith("Insufficient data"):
            raise InvalidSignature(
                "the lengths in the signature's SEQUENCE { r, s } disagree with its bytes (truncated, or trailing "
                "bytes inside)"
            ) from None
        raise InvalidSignature("signature is not DER SEQUENCE { r, s }") from None
    except Exception:
        raise InvalidSignature("signature is not DER SEQUENCE { r, s }") from None
    if not (isinstance(r, int) and isinstance(s, int)):
        raise InvalidSignature("signature is not DER SEQUENCE { r, s }")
    if r < 0 or s < 0:
        raise InvalidSignature("signature component is negative")
    if not canonical:
        raise InvalidSignature("signature is not the minimal DER of SEQUENCE { r, s } (a length or an integer)")
    if not (1 <= r < _N and 1 <= s < _N):
        raise InvalidSignature("signature component out of range")
    return r, s


def encode_der_signature(r: int, s: int) -> bytes:
    """DER ``SEQUENCE { INTEGER r, INTEGER s }`` (asn1crypto ``DSASignature``)."""
    return bytes(algos.DSASignature({"r": r, "s": s}).dump())


class Sm2PublicKey:
    """An SM2 public key. ``der`` is its SubjectPublicKeyInfo; ``key_id`` = hex SM3 of ``der``."""

    __slots__ = ("_der", "_key_id", "_raw")

    def __init__(self, raw: bytes) -> None:
        """From the 64-byte X||Y (validated). Prefer :meth:`from_pem` / :meth:`from_der`."""
        self._raw = _check_point(b"\x04" + bytes(raw))
        spki = keys.PublicKeyInfo(
            {
                "algorithm": keys.PublicKeyAlgorithm(
                    {
                        "algorithm": OID_EC_PUBLIC_KEY,
                        "parameters": keys.ECDomainParameters(name="named", value=OID_SM2_CURVE),
                    }
                ),
                "public_key": b"\x04" + self._raw,
            }
        )
        self._der: bytes = spki.dump()
        self._key_id = sm3(self._der).hex()

    @classmethod
    def from_der(cls, der: bytes) -> Sm2PublicKey:
        """Parse a DER SubjectPublicKeyInfo (id-ecPublicKey, named curve SM2, uncompressed point)."""
        if not isinstance(der, bytes | bytearray):
            raise KeyFormatError("public key DER must be bytes")
        spki = _strict_load(keys.PublicKeyInfo, bytes(der), "public key")
        try:
            _check_algorithm(spki["algorithm"])
            bits = spki["public_key"]
            if bits.unused_bits:
                raise KeyFormatError("public key BIT STRING has unused bits")
            point = bits.contents[1:]
        except KeyFormatError:
            raise
        except Exception:
            raise KeyFormatError("malformed SubjectPublicKeyInfo") from None
        key = cls(_check_point(point))
        if key.der != bytes(der):
            raise KeyFormatError("public key is not in canonical form")
        return key

    @classmethod
    def from_pem(cls, data: bytes) -> Sm2PublicKey:
        """Parse a ``PUBLIC KEY`` PEM (SubjectPublicKeyInfo)."""
        _label, der = _pem_unarmor(data, ("PUBLIC KEY",))
        return cls.from_der(der)

    @property
    def der(self) -> bytes:
        return self._der

    @property
    def raw(self) -> bytes:
        """X||Y, 64 bytes."""
        return self._raw

    @property
    def key_id(self) -> str:
        return self._key_id

    def to_pem(self) -> bytes:
        return asn1_pem.armor("PUBLIC KEY", self._der)

    def verify(self, signature: bytes, data: bytes) -> None:
        """Verify a DER SM2 signature over Z(DEFAULT_ID, key)||data. Raises InvalidSignature."""
        parse_der_signature(signature)
        try:
            ok = gmssl_pyx.sm2_verify(self._raw, bytes(data), bytes(signature), DEFAULT_ID)
        except Exception:
            raise InvalidSignature("SM2 signature verification failed") from None
        if ok is not True:
            raise InvalidSignature("SM2 signature does not verify")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sm2PublicKey) and hmac.compare_digest(self._der, other._der)

    def __hash__(self) -> int:
        return hash(self._der)

    def __repr__(self) -> str:
        return f"Sm2PublicKey(key_id={self._key_id[:16]}...)"


class Sm2PrivateKey:
    """An SM2 private key. Its scalar never appears in ``repr`` or error messages."""

    __slots__ = ("_d", "_public")

    def __init__(self, d: bytes, public: Sm2PublicKey | None = None) -> None:
        """From the 32-byte scalar and, if known, its public key (checked against the scalar).

        With ``public`` the pair is checked by a GmSSL sign + verify (constant-time code on the
        secret). Without it the public key is derived with the plain-integer arithmetic of
        ``trust._curve``, which is not constant-time: acceptable for a one-off local key load, and
        only needed for keys whose PKCS#8 lacks the public point (OpenSSL and xinserve include it).
        """
        if len(d) != 32:
            raise KeyFormatError("SM2 private key scalar must be 32 bytes")
        k = int.from_bytes(d, "big")
        if not 1 <= k <= _N - 2:
            raise KeyFormatError("SM2 private key scalar out of range")
        if public is None:
            point = _CURVE.mul(k)
            assert point is not None
            public = Sm2PublicKey(point[0].to_bytes(32, "big") + point[1].to_bytes(32, "big"))
        self._d = bytes(d)
        self._public = public
        try:
            self.sign(b"xinserve key pair check")
        except Exception:
            raise KeyFormatError("private key and its embedded public key do not match") from None

    @classmethod
    def generate(cls) -> Sm2PrivateKey:
        """A fresh key from GmSSL's generator (OS randomness)."""
        pub, priv = gmssl_pyx.sm2_key_generate()
        return cls(priv, Sm2PublicKey(pub))

    @classmethod
    def from_der(cls, der: bytes, password: bytes | None = None) -> Sm2PrivateKey:
        """Parse DER PKCS#8 ``PrivateKeyInfo`` (or ``EncryptedPrivateKeyInfo`` with ``password``)."""
        if password is not None:
            der = pkcs8.decrypt(der, password)
        pki = _strict_load(keys.PrivateKeyInfo, bytes(der), "private key")
        try:
            if pki["version"].native not in ("v1", 0):
                raise KeyFormatError("unsupported PKCS#8 version")
            _check_algorithm(pki["private_key_algorithm"])
            ec = keys.ECPrivateKey.load(pki["private_key"].contents, strict=True)
            d_int = ec["private_key"].native
            params = ec["parameters"]
            if params.native is not None and (params.name != "named" or params.chosen.dotted != OID_SM2_CURVE):
                raise KeyFormatError("ECPrivateKey names a curve other than SM2")
            pub_bits = ec["public_key"]
            public = None
            if pub_bits.native is not None:
                public = Sm2PublicKey(_check_point(pub_bits.contents[1:]))
        except KeyFormatError:
            raise
        except Exception:
            raise KeyFormatError("malformed SM2 PKCS#8 private key") from None
        if not isinstance(d_int, int) or d_int <= 0 or d_int.bit_length() > 256:
            raise KeyFormatError("SM2 private key scalar out of range")
        return cls(d_int.to_bytes(32, "big"), public)

    @classmethod
    def from_pem(cls, data: bytes, password: bytes | None = None) -> Sm2PrivateKey:
        """Parse a ``PRIVATE KEY`` or ``ENCRYPTED PRIVATE KEY`` PEM (PKCS#8)."""
        label, der = _pem_unarmor(data, ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY"))
        if label == "ENCRYPTED PRIVATE KEY":
            if password is None:
                raise KeyFormatError("the private key is password-protected: a password is needed")
            return cls.from_der(der, password)
        if password is not None:
            raise KeyFormatError("a password was given but the private key is not encrypted")
        return cls.from_der(der)

    def to_der(self) -> bytes:
        ec = keys.ECPrivateKey(
            {
                "version": "ecPrivkeyVer1",
                "private_key": int.from_bytes(self._d, "big"),
                "public_key": b"\x04" + self._public.raw,
            }
        )
        pki = keys.PrivateKeyInfo(
            {
                "version": 0,
                "private_key_algorithm": keys.PrivateKeyAlgorithm(
                    {
                        "algorithm": OID_EC_PUBLIC_KEY,
                        "parameters": keys.ECDomainParameters(name="named", value=OID_SM2_CURVE),
                    }
                ),
                "private_key": ec,
            }
        )
        return pki.dump()

    def to_pem(self, password: bytes | None = None, iterations: int = DEFAULT_KDF_ITERATIONS) -> bytes:
        """PKCS#8 PEM. With ``password``: PBES2 = PBKDF2-HMAC-SHA256 + SM4-CBC.

        OpenSSL 3.0 reads and writes exactly this (``openssl pkcs8 -topk8 -v2 sm4-cbc``); it does not
        know hmacWithSM3 as a PBKDF2 PRF, so SM3 is accepted on read but not written.
        """
        if password is None:
            return asn1_pem.armor("PRIVATE KEY", self.to_der())
        if not password:
            raise ValueError("an empty password protects nothing")
        return asn1_pem.armor("ENCRYPTED PRIVATE KEY", pkcs8.encrypt(self.to_der(), password, iterations))

    def public_key(self) -> Sm2PublicKey:
        return self._public

    def sign(self, data: bytes) -> bytes:
        """DER signature over Z(DEFAULT_ID, public key)||data, random k from GmSSL."""
        sig = gmssl_pyx.sm2_sign(self._d, self._public.raw, bytes(data), DEFAULT_ID)
        self._public.verify(sig, data)  # never hand out a signature that does not verify
        return bytes(sig)

    def __repr__(self) -> str:
        return f"Sm2PrivateKey(key_id={self._public.key_id[:16]}...)"


def b64decode_strict(text: str | bytes) -> bytes:
    """Strict standard base64 (padding required, no stray characters)."""
    if isinstance(text, str):
        if not re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", text):
            raise ValueError("not base64")
        text = text.encode("ascii")
    try:
        out = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None
    if base64.b64encode(out) != text:
        raise ValueError("non-canonical base64")
    return out
