"""RFC 3161 time-stamps of checkpoints, through ``rfc3161-client``.

The message imprint is SHA-256 of the checkpoint's payload (the bytes its SM2 signature
covers). A token proves that the checkpoint, and so every record up to its ``tree_size``,
existed at the TSA's ``genTime``: with the server key alone nobody can back-date a checkpoint.

Replies whose SignedData carries the TSA's chain (``openssl ts`` with ``certs =``) are accepted:
``openssl ts`` writes that ``certificates`` SET unsorted, which strict DER parsers refuse, so the
SET is re-encoded in DER order (RFC 5652 section 5.1; the SET is not covered by the signature).
"""

from __future__ import annotations

import datetime
import hashlib
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from audit.config import TsaSettings
from audit.errors import AuditError

CONTENT_TYPE_QUERY = "application/timestamp-query"
CONTENT_TYPE_REPLY = "application/timestamp-reply"
MAX_REPLY_BYTES = 1 << 20


class TimestampError(AuditError):
    """The TSA could not be reached, refused the request, or answered with an unusable token."""


def fetch_timestamp(settings: TsaSettings, payload: bytes) -> bytes:
    """Ask the TSA at ``settings.url`` to time-stamp ``payload``; return its ``TimeStampResp`` (DER).

    The reply must be granted, carry the request's nonce and imprint SHA-256 of ``payload``
    (RFC 3161 section 2.4.2). Blocking (call it from a worker thread). Raises :class:`TimestampError`.
    """
    from rfc3161_client import HashAlgorithm, PKIStatus, TimestampRequestBuilder, decode_timestamp_response

    request = TimestampRequestBuilder().data(payload).hash_algorithm(HashAlgorithm.SHA256).build()
    http = urllib.request.Request(  # noqa: S310 (TsaSettings.url is http(s) only)
        settings.url,
        data=request.as_bytes(),
        headers={"Content-Type": CONTENT_TYPE_QUERY, "Accept": CONTENT_TYPE_REPLY},
        method="POST",
    )
    context = ssl.create_default_context(cafile=str(settings.ca_file) if settings.ca_file else None)
    try:
        with urllib.request.urlopen(http, timeout=settings.timeout_s, context=context) as reply:  # noqa: S310
            body = reply.read(MAX_REPLY_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise TimestampError(f"the TSA answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__
        raise TimestampError(f"the TSA is unreachable ({reason})") from None
    if len(body) > MAX_REPLY_BYTES:
        raise TimestampError("the TSA's reply is larger than 1 MiB")
    body = _der_certificate_set(body, "the TSA's reply")
    try:
        response = decode_timestamp_response(body)
    except ValueError:
        raise TimestampError("the TSA's reply is not an RFC 3161 TimeStampResp") from None
    if response.status not in (PKIStatus.GRANTED, PKIStatus.GRANTED_WITH_MODS):
        raise TimestampError(f"the TSA refused the request (PKIStatus {response.status})")
    info = response.tst_info
    if request.nonce is not None and info.nonce != request.nonce:
        raise TimestampError("the TSA's reply carries another nonce")
    if info.message_imprint.message != hashlib.sha256(payload).digest():
        raise TimestampError("the TSA time-stamped another message")
    token = response.as_bytes()
    if settings.trust_file is not None:
        try:
            roots = load_tsa_roots(settings.trust_file.read_bytes())
        except (OSError, ValueError):
            raise TimestampError(f"tsa.trust_file {settings.trust_file.name} is not a readable PEM bundle") from None
        verify_timestamp(token, payload, roots)
    return token


def _reason(exc: Exception) -> str:
    """The short reason of a rfc3161-client failure: OpenSSL's ``Verify error`` text if any."""
    text = str(exc)
    found = re.search(r"Verify error: ([^\"]+)", text)
    return f"certificate path: {found.group(1)}" if found else text[:160]


def _der_certificate_set(token: bytes, what: str) -> bytes:
    """``token`` (a ``TimeStampResp``) with its SignedData ``certificates`` SET in DER order.

    Only that SET changes; the signed content and the SignerInfos keep their bytes. Returns
    ``token`` itself when there is nothing to re-encode. Raises :class:`TimestampError`.
    """
    from asn1crypto import cms, tsp

    try:
        resp = tsp.TimeStampResp.load(token, strict=True)
        stamp = resp["time_stamp_token"]
        if stamp.native is None or stamp["content_type"].native != "signed_data":
            return token
        signed = stamp["content"]
        certs = signed["certificates"]
        if certs.native is None or len(certs) < 2:
            return token
        encap, signers = signed["encap_content_info"].dump(), signed["signer_infos"].dump()
        signed["certificates"] = cms.CertificateSet(list(certs))
        stamp["content"] = signed
        resp["time_stamp_token"] = stamp
        out = resp.dump()
        again = tsp.TimeStampResp.load(out, strict=True)["time_stamp_token"]["content"]
    except (ValueError, TypeError, KeyError):
        raise TimestampError(f"{what} is not an RFC 3161 TimeStampResp") from None
    if again["encap_content_info"].dump() != encap or again["signer_infos"].dump() != signers:
        raise TimestampError(f"{what} is not an RFC 3161 TimeStampResp")
    return bytes(out)


def _check_signing_certificate(token: bytes) -> None:
    """The SignerInfo's ESSCertIDv2 (or ESSCertID) names the certificate that signed ``token``.

    RFC 5816 / RFC 2634 section 5.4: the first ``certs`` entry holds the hash of the signer's
    certificate and, if present, its issuer and serial number. Raises :class:`TimestampError`.
    """
    from asn1crypto import tsp

    signed = tsp.TimeStampResp.load(token)["time_stamp_token"]["content"]
    signers = list(signed["signer_infos"])
    if len(signers) != 1:
        raise TimestampError(f"the time-stamp token has {len(signers)} signers, not one")
    signer = signers[0]
    sid = signer["sid"]
    if sid.name != "issuer_and_serial_number":
        raise TimestampError("the time-stamp token names its signer by key id, not issuer and serial")
    issuer, serial = sid.chosen["issuer"], sid.chosen["serial_number"].native
    cert = next(
        (
            c.chosen
            for c in signed["certificates"] or []
            if c.name == "certificate" and c.chosen.issuer == issuer and c.chosen.serial_number == serial
        ),
        None,
    )
    if cert is None:
        raise TimestampError("the time-stamp token does not carry its signer's certificate")
    ids: Any = None
    for attr in signer["signed_attrs"] or []:
        if attr["type"].native in ("signing_certificate_v2", "signing_certificate"):
            ids = (attr["type"].native, attr["values"][0]["certs"])
            break
    if ids is None or len(ids[1]) == 0:
        raise TimestampError("the time-stamp token has no ESSCertID of its signer")
    kind, cert_ids = ids
    first = cert_ids[0]
    algorithm = first["hash_algorithm"]["algorithm"].native if kind == "signing_certificate_v2" else "sha1"
    try:
        digest = hashlib.new(algorithm, cert.dump()).digest()
    except ValueError:
        raise TimestampError(f"the time-stamp token's ESSCertID uses an unknown hash ({algorithm})") from None
    if first["cert_hash"].native != digest:
        raise TimestampError("the time-stamp token's ESSCertID names another certificate than its signer")
    named = first["issuer_serial"]
    if named.native is not None and named["serial_number"].native != serial:
        raise TimestampError("the time-stamp token's ESSCertID names another certificate than its signer")


def load_tsa_roots(pem: bytes) -> list[Any]:
    """The certificates of a PEM bundle (trust anchors of the TSA). Raises ``ValueError``."""
    from cryptography import x509

    return list(x509.load_pem_x509_certificates(pem))


def verify_timestamp(token: bytes, payload: bytes, roots: Sequence[Any]) -> int:
    """Check a ``TimeStampResp`` over ``payload`` against the TSA trust ``roots``.

    Verifies the CMS signature and the path from one of ``roots`` through the intermediates
    the token carries to the signer (valid at ``genTime``), the signer's critical
    ``timeStamping`` EKU (RFC 3161 section 2.3), its ESSCertIDv2 (RFC 5816) and the imprint
    (SHA-256/384/512 of ``payload``).
    Returns ``genTime`` in milliseconds since the epoch. Raises :class:`TimestampError`.
    """
    from rfc3161_client import VerificationError, VerifierBuilder, decode_timestamp_response

    token = _der_certificate_set(token, "the time-stamp token")
    try:
        response = decode_timestamp_response(token)
    except ValueError:
        raise TimestampError("not an RFC 3161 TimeStampResp") from None
    builder = VerifierBuilder()
    for root in roots:
        builder = builder.add_root_certificate(root)
    try:
        builder.build().verify_message(response, payload)
    except (VerificationError, ValueError) as exc:
        raise TimestampError(f"the time-stamp token does not verify ({_reason(exc)})") from None
    _check_signing_certificate(token)
    gen = response.tst_info.gen_time
    if gen.tzinfo is None:
        gen = gen.replace(tzinfo=datetime.timezone.utc)
    return int(gen.timestamp() * 1000)
