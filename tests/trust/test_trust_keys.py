"""SM2 keys and signatures: encodings, passwords, and hostile input that must fail closed."""

from __future__ import annotations

import base64

import pytest
from asn1crypto import keys as asn1_keys
from hypothesis import given, settings
from hypothesis import strategies as st

from trust._curve import SM2P256V1
from trust.errors import InvalidSignature, KeyFormatError
from trust.sm2 import (
    OID_SM2_CURVE,
    Sm2PrivateKey,
    Sm2PublicKey,
    encode_der_signature,
    parse_der_signature,
)
from trust.sm3 import sm3_hex

N = SM2P256V1.n


def spki(point: bytes, curve_oid: str = OID_SM2_CURVE, alg_oid: str = "1.2.840.10045.2.1") -> bytes:
    """Hand-built SubjectPublicKeyInfo DER (point given raw, so invalid points can be encoded)."""
    alg = (
        b"\x06\x07" + bytes.fromhex("2a8648ce3d0201")
        if alg_oid == "1.2.840.10045.2.1"
        else asn1_keys.PublicKeyAlgorithmId(alg_oid).dump()
    )
    from asn1crypto.core import ObjectIdentifier

    curve = ObjectIdentifier(curve_oid).dump()
    alg_seq = b"\x30" + bytes([len(alg) + len(curve)]) + alg + curve
    bits = b"\x03" + bytes([len(point) + 1]) + b"\x00" + point
    body = alg_seq + bits
    return b"\x30" + bytes([len(body)]) + body


def test_key_roundtrip_pem_and_key_id(key: Sm2PrivateKey) -> None:
    pub = key.public_key()
    assert Sm2PublicKey.from_pem(pub.to_pem()) == pub
    assert Sm2PublicKey.from_der(pub.der) == pub
    assert pub.key_id == sm3_hex(pub.der)
    assert Sm2PrivateKey.from_pem(key.to_pem()).public_key() == pub
    assert spki(b"\x04" + pub.raw) == pub.der  # our hand-built encoder matches the canonical form


def test_password_protected_key(key: Sm2PrivateKey) -> None:
    pem = key.to_pem(b"s3cret", iterations=1000)
    assert b"ENCRYPTED PRIVATE KEY" in pem
    assert Sm2PrivateKey.from_pem(pem, b"s3cret").public_key() == key.public_key()
    with pytest.raises(KeyFormatError, match="password"):
        Sm2PrivateKey.from_pem(pem, b"wrong")
    with pytest.raises(KeyFormatError, match="password"):
        Sm2PrivateKey.from_pem(pem)
    with pytest.raises(KeyFormatError):
        Sm2PrivateKey.from_pem(key.to_pem(), b"unexpected")


def test_repr_never_shows_the_scalar(key: Sm2PrivateKey) -> None:
    d_hex = key.to_der()[-100:].hex()
    assert "key_id" in repr(key) and d_hex not in repr(key)


def test_private_key_with_mismatched_public_key_is_refused(key: Sm2PrivateKey, other_key: Sm2PrivateKey) -> None:
    der = bytearray(key.to_der())
    other_point = b"\x04" + other_key.public_key().raw
    mine = b"\x04" + key.public_key().raw
    idx = bytes(der).index(mine)
    der[idx : idx + 65] = other_point
    with pytest.raises(KeyFormatError, match="do not match"):
        Sm2PrivateKey.from_der(bytes(der))


@pytest.mark.parametrize(
    ("label", "mutate"),
    [
        ("trailing bytes", lambda d: d + b"\x00"),
        ("truncated", lambda d: d[:-1]),
        ("empty", lambda d: b""),
        ("garbage", lambda d: b"\x30\x82\xff\xff" + d),
        ("not a sequence", lambda d: b"\x04" + d[1:]),
    ],
)
def test_malformed_public_key_der(key: Sm2PrivateKey, label: str, mutate) -> None:
    with pytest.raises(KeyFormatError):
        Sm2PublicKey.from_der(mutate(key.public_key().der))


def test_off_curve_point_is_refused(key: Sm2PrivateKey) -> None:
    raw = bytearray(b"\x04" + key.public_key().raw)
    raw[-1] ^= 1
    with pytest.raises(KeyFormatError, match="not on"):
        Sm2PublicKey.from_der(spki(bytes(raw)))


def test_point_at_infinity_and_zero_point_are_refused() -> None:
    with pytest.raises(KeyFormatError):
        Sm2PublicKey.from_der(spki(b"\x00"))  # SEC1 encoding of the point at infinity
    with pytest.raises(KeyFormatError):
        Sm2PublicKey.from_der(spki(b"\x04" + bytes(64)))
    with pytest.raises(KeyFormatError):
        Sm2PublicKey(bytes(64))


def test_coordinates_not_reduced_mod_p_are_refused(key: Sm2PrivateKey) -> None:
    raw = key.public_key().raw
    x = int.from_bytes(raw[:32], "big") + SM2P256V1.p
    if x < 1 << 256:  # x + p still fits in 32 bytes for roughly half of all keys
        with pytest.raises(KeyFormatError):
            Sm2PublicKey.from_der(spki(b"\x04" + x.to_bytes(32, "big") + raw[32:]))


def test_compressed_point_is_refused(key: Sm2PrivateKey) -> None:
    raw = key.public_key().raw
    prefix = 2 + (raw[-1] & 1)
    with pytest.raises(KeyFormatError, match="uncompressed"):
        Sm2PublicKey.from_der(spki(bytes([prefix]) + raw[:32]))


def test_wrong_curve_oid_is_refused(key: Sm2PrivateKey) -> None:
    with pytest.raises(KeyFormatError, match="not SM2"):
        Sm2PublicKey.from_der(spki(b"\x04" + key.public_key().raw, curve_oid="1.2.840.10045.3.1.7"))


def test_p256_key_from_cryptography_is_refused() -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    p256 = ec.generate_private_key(ec.SECP256R1())
    pub_pem = p256.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(KeyFormatError):
        Sm2PublicKey.from_pem(pub_pem)
    priv_pem = p256.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(KeyFormatError):
        Sm2PrivateKey.from_pem(priv_pem)


def test_pem_problems(key: Sm2PrivateKey) -> None:
    with pytest.raises(KeyFormatError):
        Sm2PublicKey.from_pem(b"not pem at all")
    with pytest.raises(KeyFormatError, match="label"):
        Sm2PublicKey.from_pem(key.to_pem())  # a private key where a public one is expected
    with pytest.raises(KeyFormatError):
        Sm2PublicKey.from_pem(key.public_key().to_pem() * 2)
    with pytest.raises(KeyFormatError):
        Sm2PublicKey.from_pem(b"-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----\n")


def test_private_scalar_range() -> None:
    for bad in (0, N - 1, N, (1 << 256) - 1):
        with pytest.raises(KeyFormatError):
            Sm2PrivateKey(bad.to_bytes(32, "big"))


# --- signatures ---------------------------------------------------------------------------------


def test_sign_verify_and_wrong_message(key: Sm2PrivateKey, other_key: Sm2PrivateKey) -> None:
    sig = key.sign(b"payload")
    key.public_key().verify(sig, b"payload")
    with pytest.raises(InvalidSignature):
        key.public_key().verify(sig, b"payloaD")
    with pytest.raises(InvalidSignature):
        other_key.public_key().verify(sig, b"payload")


def _minimal(x: int) -> bytes:
    """The minimal DER INTEGER content of a non-negative x (a leading 0x00 when the top bit is set)."""
    return x.to_bytes(x.bit_length() // 8 + 1, "big")


def _der(rb: bytes, sb: bytes) -> bytes:
    inner = b"\x02" + bytes([len(rb)]) + rb + b"\x02" + bytes([len(sb)]) + sb
    return b"\x30" + bytes([len(inner)]) + inner


HOSTILE = [
    ("truncated", lambda sig, r, s: sig[:-1], "SEQUENCE"),
    ("padded", lambda sig, r, s: sig + b"\x00", "trailing"),
    ("padded inside", lambda sig, r, s: sig[:1] + bytes([sig[1] + 1]) + sig[2:] + b"\x00", "trailing"),
    ("raw r||s", lambda sig, r, s: r.to_bytes(32, "big") + s.to_bytes(32, "big"), "SEQUENCE"),
    ("long-form length", lambda sig, r, s: b"\x30\x81" + sig[1:], "SEQUENCE"),
    ("empty", lambda sig, r, s: b"", "SEQUENCE"),
    ("wrong tag", lambda sig, r, s: b"\x31" + sig[1:], "SEQUENCE"),
    ("r = 0", lambda sig, r, s: encode_der_signature(0, s), "range"),
    ("s = 0", lambda sig, r, s: encode_der_signature(r, 0), "range"),
    ("r = n", lambda sig, r, s: encode_der_signature(N, s), "range"),
    ("s + n", lambda sig, r, s: encode_der_signature(r, N + s), "range"),
    (
        "negative r",
        lambda sig, r, s: _der((r | 1 << 255).to_bytes(32, "big"), s.to_bytes(32, "big")),
        "negative",
    ),
    (
        "non-minimal r",
        # s stays minimal and positive: only r's encoding is at fault, whatever the random s.
        lambda sig, r, s: _der(b"\x00\x00" + r.to_bytes(32, "big"), _minimal(s)),
        "minimal|length",
    ),
]


@pytest.mark.parametrize(("name", "mutate", "why"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_signatures_fail_closed(key: Sm2PrivateKey, name: str, mutate, why: str) -> None:
    sig = key.sign(b"m")
    r, s = parse_der_signature(sig)
    with pytest.raises(InvalidSignature, match=why):
        key.public_key().verify(mutate(sig, r, s), b"m")


def test_valid_signature_rejected_if_library_raises(key: Sm2PrivateKey, monkeypatch) -> None:
    import gmssl_pyx

    sig = key.sign(b"m")

    def boom(*a, **k):
        raise RuntimeError("library bug")

    monkeypatch.setattr(gmssl_pyx, "sm2_verify", boom)
    with pytest.raises(InvalidSignature):
        key.public_key().verify(sig, b"m")


def test_library_returning_non_true_is_failure(key: Sm2PrivateKey, monkeypatch) -> None:
    import gmssl_pyx

    sig = key.sign(b"m")
    monkeypatch.setattr(gmssl_pyx, "sm2_verify", lambda *a, **k: 1)  # truthy but not True
    with pytest.raises(InvalidSignature):
        key.public_key().verify(sig, b"m")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=100))
def test_random_bytes_never_crash_verify(blob: bytes) -> None:
    pub = _SESSION_KEY.public_key()
    with pytest.raises(InvalidSignature):
        pub.verify(blob, b"m")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120))
def test_random_bytes_never_crash_key_parsing(blob: bytes) -> None:
    with pytest.raises(KeyFormatError):
        Sm2PublicKey.from_der(blob)
    with pytest.raises(KeyFormatError):
        Sm2PrivateKey.from_der(blob)
    with pytest.raises(KeyFormatError):
        Sm2PublicKey.from_pem(
            b"-----BEGIN PUBLIC KEY-----\n" + base64.encodebytes(blob) + b"-----END PUBLIC KEY-----\n"
        )


_SESSION_KEY = Sm2PrivateKey.generate()


def test_pkcs8_without_public_point_derives_it(key: Sm2PrivateKey) -> None:
    from asn1crypto import keys as k

    pki = k.PrivateKeyInfo.load(key.to_der())
    ec = k.ECPrivateKey.load(pki["private_key"].contents)
    bare = k.ECPrivateKey({"version": "ecPrivkeyVer1", "private_key": ec["private_key"].native})
    der = k.PrivateKeyInfo(
        {"version": 0, "private_key_algorithm": pki["private_key_algorithm"], "private_key": bare}
    ).dump()
    assert Sm2PrivateKey.from_der(der).public_key() == key.public_key()
