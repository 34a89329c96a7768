"""Channel-bound TEE attestation (``xinserve.v1.AttestationService``), client side.

:func:`attestation` asks the server for evidence over a fresh nonce; :meth:`Attestation.binds`
checks that its report data is
``SM3(u32be(len(nonce)) ‖ nonce ‖ SHA-256(SPKI of the certificate) ‖ u32be(n) ‖ sorted SM3
manifest digests)`` zero-padded to 64 bytes. grpcio does not show a client the certificate its
connection ran on, so the channel is bound by pinning: a client whose ``ca_cert`` is exactly one
end-entity certificate (the server's own) completes a TLS handshake only with the holder of that
certificate's key, and :func:`verify_channel` binds the attestation to that certificate
(:attr:`Attestation.channel_certificate`). A probe over a second connection proves nothing about
the first (a proxy can terminate one and pass the other through), so there is none. The evidence
itself (TDX quote, SNP report, CSV report...) is checked by a :class:`Verifier`: a hardware
verifier (Intel DCAP, AMD KDS, Hygon, or an attestation service) is the deployer's;
:class:`RecordedVerifier` accepts only replayed ``sample`` evidence, for tests and demos.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
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


def pinned_certificate(root_certificates: bytes | None) -> bytes | None:
    """The DER certificate a TLS channel with these PEM trust roots is pinned to: the one
    certificate when ``root_certificates`` holds exactly one and it cannot issue others
    (X.509 v3, and no ``basicConstraints`` with ``cA`` true); else None (a CA, a bundle, the
    system store), for then any certificate such a root issued could terminate the channel."""
    if not root_certificates:
        return None
    try:
        certs = x509.load_pem_x509_certificates(root_certificates)
    except ValueError:
        return None
    if len(certs) != 1 or certs[0].version is not x509.Version.v3:
        return None
    try:
        if certs[0].extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            return None
    except x509.ExtensionNotFound:
        pass
    return certs[0].public_bytes(serialization.Encoding.DER)


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
    channel_certificate: bytes | None = None
    """DER of the certificate the call's channel was pinned to (:func:`pinned_certificate` of
    the client's ``ca_cert``): the only certificate its TLS handshake could accept. None when
    the channel trusts a CA or the system store."""

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

    ``nonce`` defaults to 32 fresh random bytes. The answer carries the channel's pinned
    certificate (:attr:`Attestation.channel_certificate`) when the client's ``ca_cert`` is the
    server's certificate itself. Raises the client's typed errors
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
        channel_certificate=pinned_certificate(client._config.root_certificates),
    )


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
    att: Attestation, verifier: Verifier, expected_models: Sequence[str] | None = None
) -> VerifiedEvidence:
    """Both checks at once: the verifier accepts the evidence and it binds the channel the call
    ran on, i.e. the certificate that channel is pinned to (:attr:`Attestation.channel_certificate`),
    this nonce and the models (exactly ``expected_models``' digests when given).

    Raises:
        AttestationError: the channel is not pinned to one server certificate (the client's
            ``ca_cert`` was a CA or absent), the verifier refused the evidence, or the report
            data does not bind that certificate, nonce and models.
    """
    if att.channel_certificate is None:
        raise AttestationError(
            "the channel is not pinned to one server certificate, so the attestation cannot be bound to it: "
            "create the client with ca_cert=<the server's certificate>"
        )
    verified = verifier.verify(att)
    if verified.report_data != att.report_data or not att.binds(att.channel_certificate, expected_models):
        raise AttestationError("the attestation does not bind this channel's TLS certificate, nonce and models")
    return verified
