"""What report data binds: a KBS session key, or a TLS channel and the served models.

* KBS (Trustee ``kbs_attestation_protocol.md``): the evidence's report data is the SHA-384 of the
  ``runtime-data`` JSON ``{"nonce": <challenge nonce>, "tee-pubkey": <JWK>}`` serialised with
  sorted keys and no whitespace (what Trustee's attestation service hashes), zero-padded to 64
  bytes.
* Channel binding (``AttestationService.GetAttestation``): report data is
  ``SM3(u32be(len(nonce)) ‖ nonce ‖ SHA-256(server certificate SubjectPublicKeyInfo DER) ‖
  u32be(n) ‖ d_1 ‖ … ‖ d_n)`` where ``d_i`` are the served models' SM3 manifest digests (32 bytes
  each) in ascending byte order, zero-padded to 64 bytes. The Python client computes the same
  (``xinserve_client.attestation``).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from trust.sm3 import sm3
from trust.tee.evidence import REPORT_DATA_SIZE

MIN_NONCE = 16
MAX_NONCE = 64


def runtime_data(nonce: str, tee_pubkey: Mapping[str, Any]) -> dict[str, Any]:
    """The KBS ``runtime-data`` object."""
    return {"nonce": nonce, "tee-pubkey": dict(tee_pubkey)}


def kbs_report_data(nonce: str, tee_pubkey: Mapping[str, Any]) -> bytes:
    """64 bytes: SHA-384 of the canonical ``runtime-data`` JSON, zero-padded."""
    canonical = json.dumps(runtime_data(nonce, tee_pubkey), sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha384(canonical).digest().ljust(REPORT_DATA_SIZE, b"\0")


def spki_sha256(certificate: bytes) -> bytes:
    """SHA-256 of the SubjectPublicKeyInfo (DER) of a PEM or DER X.509 certificate.

    Raises ValueError if ``certificate`` is neither.
    """
    cert = (
        x509.load_pem_x509_certificate(certificate)
        if certificate.lstrip().startswith(b"-----BEGIN")
        else x509.load_der_x509_certificate(certificate)
    )
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(spki).digest()


def digest_bytes(manifest_digest: str) -> bytes:
    """``sm3:<64 hex>`` → 32 bytes; ValueError otherwise."""
    algorithm, _, hexdigest = manifest_digest.partition(":")
    if algorithm != "sm3" or len(hexdigest) != 64:
        raise ValueError("a manifest digest is 'sm3:' and 64 hex characters")
    return bytes.fromhex(hexdigest)


def channel_report_data(nonce: bytes, spki_hash: bytes, manifest_digests: Iterable[str]) -> bytes:
    """The 64 report-data bytes of a channel-bound attestation (see the module docstring).

    Raises ValueError for a nonce outside 16..64 bytes, an SPKI hash that is not 32 bytes, or a
    malformed manifest digest.
    """
    if not MIN_NONCE <= len(nonce) <= MAX_NONCE:
        raise ValueError(f"nonce must be {MIN_NONCE} to {MAX_NONCE} bytes")
    if len(spki_hash) != 32:
        raise ValueError("the SPKI hash is a 32-byte SHA-256")
    digests = sorted(digest_bytes(d) for d in manifest_digests)
    message = struct.pack(">I", len(nonce)) + nonce + spki_hash + struct.pack(">I", len(digests)) + b"".join(digests)
    return sm3(message).ljust(REPORT_DATA_SIZE, b"\0")
