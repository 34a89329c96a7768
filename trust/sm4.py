"""SM4-GCM authenticated encryption (GB/T 32907, RFC 8998 parameters) from pyca/cryptography.

Sealed format (version 1): ``b"\\x01" || nonce (12 bytes, random) || ciphertext || tag (16 bytes)``.
The version byte is authenticated as part of the associated data. A key must never be used for more
than 2**32 seals (random 96-bit nonces).
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from trust.errors import DecryptionError

KEY_SIZE = 16
NONCE_SIZE = 12
TAG_SIZE = 16
VERSION = 1
OVERHEAD = 1 + NONCE_SIZE + TAG_SIZE


def generate_key() -> bytes:
    """A fresh random 16-byte SM4 key."""
    return os.urandom(KEY_SIZE)


def _check_key(key: bytes) -> None:
    if not isinstance(key, bytes | bytearray) or len(key) != KEY_SIZE:
        raise ValueError("an SM4 key is exactly 16 bytes")


def _aad(aad: bytes) -> bytes:
    return bytes([VERSION]) + aad


def seal(key: bytes, plaintext: bytes, aad: bytes = b"") -> bytes:
    """Encrypt and authenticate ``plaintext`` (and authenticate ``aad``) under ``key``."""
    _check_key(key)
    nonce = os.urandom(NONCE_SIZE)
    enc = Cipher(algorithms.SM4(bytes(key)), modes.GCM(nonce)).encryptor()
    enc.authenticate_additional_data(_aad(aad))
    ct = enc.update(plaintext) + enc.finalize()
    return bytes([VERSION]) + nonce + ct + enc.tag


def open_(key: bytes, sealed: bytes, aad: bytes = b"") -> bytes:
    """Decrypt what :func:`seal` produced; raises :class:`DecryptionError` on any mismatch."""
    _check_key(key)
    if len(sealed) < OVERHEAD or sealed[0] != VERSION:
        raise DecryptionError("not an SM4-GCM sealed blob of a known version")
    nonce = sealed[1 : 1 + NONCE_SIZE]
    ct, tag = sealed[1 + NONCE_SIZE : -TAG_SIZE], sealed[-TAG_SIZE:]
    try:
        dec = Cipher(algorithms.SM4(bytes(key)), modes.GCM(nonce, tag)).decryptor()
        dec.authenticate_additional_data(_aad(aad))
        return dec.update(ct) + dec.finalize()
    except InvalidTag:
        raise DecryptionError("SM4-GCM authentication failed") from None


# Alias for callers that prefer a non-underscored name.
unseal = open_
