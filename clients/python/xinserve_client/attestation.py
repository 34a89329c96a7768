"""Channel-bound TEE attestation (``xinserve.v1.AttestationService``), client side.

:func:`attestation` asks the server for evidence over a fresh nonce; :meth:`Attestation.binds`
checks that its report data is
``SM3(u32be(len(nonce)) ‖ nonce ‖ SHA-256(SPKI of the certificate) ‖ u32be(n) ‖ sorted SM3
manifest digests)`` zero-padded to 64 bytes, for the certificate the client sees on its connection
(pinned, or read with :func:`peer_certificate`). The evidence itself (TDX quote, SNP report, CSV
report...) is checked by a :class:`Verifier`: a hardware verifier (Intel DCAP, AMD KDS, Hygon,
or an attestation service) is the deployer's; :class:`RecordedVerifier` accepts only replayed
``sample`` evidence, for tests and demos.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import socket
import ssl
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from xinserve.v1 import attestation_pb2, attestation_pb2_grpc

REPORT_DATA_SIZE = 64
NONCE_SIZE = 32


class AttestationError(Exception):
    """The attestation does not bind this channel, or its evidence did not verify."""


def _sm3(data: bytes) -> bytes:
    h = hashes.Hash(hashes.SM3())
    h.update(data)
    return h.finalize()


def spki_sha256(certificate: bytes) -> bytes:
    """SHA-256 of the SubjectPublicKeyInfo (DER) of a PEM or DER certificate."""
    cert = (
        x509.load_pem_x509_certificate(certificate)
        if certificate.lstrip().startswith(b"-----BEGIN")
        else x509.load_der_x509_certificate(certificate)
    )
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(spki).digest()


def expected_report_data(nonce: bytes, spki_hash: bytes, manifest_digests: Iterable[str]) -> bytes:
    """The 64 report-data bytes the server must have bound (see the module docstring)."""
    digests = []
    for d in manifest_digests:
        algorithm, _, hexdigest = d.partition(":")
        if algorithm != "sm3" or len(hexdigest) != 64:
            raise AttestationError(f"manifest digest {d[:80]!r} is not sm3:<64 hex>")
        digests.append(bytes.fromhex(hexdigest))
    digests.sort()
    message = struct.pack(">I", len(nonce)) + nonce + spki_hash + struct.pack(">I", len(digests)) + b"".join(digests)
    return _sm3(message).ljust(REPORT_DATA_SIZE, b"\0")


@dataclass(frozen=True)
class Attestation:
    """A GetAttestation answer and the nonce it was asked with."""

    nonce: bytes
    tee: str
    evidence: bytes
    aux_evidence: bytes
    report_data: bytes
    spki_sha256: bytes
    manifest_digests: tuple[str, ...]
    recorded: bool

    def binds(self, certificate: bytes, expected_models: Sequence[str] | None = None) -> bool:
        """True when the report data binds this nonce, ``certificate`` (PEM or DER: the one on the
        client's connection) and the listed manifest digests (and, if given, exactly
        ``expected_models``' digests). The evidence's own report data must equal
        :attr:`report_data`: that is the :class:`Verifier`'s check."""
        if expected_models is not None and sorted(expected_models) != sorted(self.manifest_digests):
            return False
        try:
            spki = spki_sha256(certificate)
            expected = expected_report_data(self.nonce, spki, self.manifest_digests)
        except (ValueError, AttestationError):
            return False
        return spki == self.spki_sha256 and expected == self.report_data


def attestation(client: Any, nonce: bytes | None = None, *, timeout: Any = None) -> Attestation:
    """Call ``GetAttestation`` on a :class:`~xinserve_client.XinserveClient`'s channel.

    ``nonce`` defaults to 32 fresh random bytes. Raises the client's typed errors
    (FailedPreconditionError without a TEE or over plaintext, InvalidArgumentError for a nonce
    outside 16..64 bytes).
    """
    nonce = os.urandom(NONCE_SIZE) if nonce is None else bytes(nonce)
    if timeout is None:
        from ._common import DEFAULT

        timeout = DEFAULT
    stub = attestation_pb2_grpc.AttestationServiceStub(client._channel)
    kwargs, rid = client._call_args(timeout=timeout, control=True, metadata=None)
    r = client._unary(stub.GetAttestation, attestation_pb2.GetAttestationRequest(nonce=nonce), kwargs, rid)
    return Attestation(
        nonce=nonce,
        tee=r.tee,
        evidence=r.evidence,
        aux_evidence=r.aux_evidence,
        report_data=r.report_data,
        spki_sha256=r.spki_sha256,
        manifest_digests=tuple(r.manifest_digests),
        recorded=r.recorded,
    )


def peer_certificate(target: str, root_certificates: bytes | None = None, timeout: float = 10.0) -> bytes:
    """The DER certificate the TLS endpoint ``host:port`` presents (verified against
    ``root_certificates`` PEM, or the system CAs). Prefer pinning the certificate you configured
    for the channel; this opens a second TLS connection to the same endpoint."""
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    ctx = ssl.create_default_context(cadata=root_certificates.decode() if root_certificates else None)
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        with ctx.wrap_socket(sock, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    if der is None:
        raise AttestationError("the endpoint presented no certificate")
    return der


@dataclass(frozen=True)
class VerifiedEvidence:
    """What a verifier vouches for: the TEE and the 64 report-data bytes inside the evidence."""

    tee: str
    report_data: bytes
    recorded: bool
    claims: dict[str, Any]


class Verifier(Protocol):
    """Checks evidence (signatures, certificate chains, TCB) and returns its report data.

    Raises AttestationError when the evidence does not verify."""

    def verify(self, attestation: Attestation) -> VerifiedEvidence: ...


class RecordedVerifier:
    """Accepts only recorded ``sample`` evidence (xinserve's ``recorded`` provider): it proves
    nothing about hardware and exists for tests and demos. Refuses everything else."""

    def verify(self, attestation: Attestation) -> VerifiedEvidence:
        if attestation.tee != "sample" or not attestation.recorded:
            raise AttestationError(f"the recorded verifier cannot verify {attestation.tee!r} hardware evidence")
        try:
            doc = json.loads(attestation.evidence)
            data = base64.b64decode(doc["report_data"], validate=True)
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise AttestationError("recorded evidence is malformed") from None
        if doc.get("recorded") is not True or len(data) != REPORT_DATA_SIZE:
            raise AttestationError("recorded evidence is not marked recorded or has no 64-byte report data")
        if data != attestation.report_data:
            raise AttestationError("the evidence's report data differs from the answer's")
        return VerifiedEvidence("sample", data, True, {"source": str(doc.get("source", ""))})


def verify_channel(
    att: Attestation, certificate: bytes, verifier: Verifier, expected_models: Sequence[str] | None = None
) -> VerifiedEvidence:
    """Both checks at once: the verifier accepts the evidence and it binds this channel.

    Raises AttestationError otherwise."""
    verified = verifier.verify(att)
    if verified.report_data != att.report_data or not att.binds(certificate, expected_models):
        raise AttestationError("the attestation does not bind this TLS certificate, nonce and models")
    return verified
