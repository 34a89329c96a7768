"""RFC 3161 time-stamps of checkpoints, through ``rfc3161-client``.

The message imprint is SHA-256 of the checkpoint's payload (the bytes its SM2 signature
covers). A token proves that the checkpoint, and so every record up to its ``tree_size``,
existed at the TSA's ``genTime``: with the server key alone nobody can back-date a checkpoint.
"""

from __future__ import annotations

import datetime
import hashlib
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
    return response.as_bytes()


def load_tsa_roots(pem: bytes) -> list[Any]:
    """The certificates of a PEM bundle (trust anchors of the TSA). Raises ``ValueError``."""
    from cryptography import x509

    return list(x509.load_pem_x509_certificates(pem))


def verify_timestamp(token: bytes, payload: bytes, roots: Sequence[Any]) -> int:
    """Check a ``TimeStampResp`` over ``payload`` against the TSA trust ``roots``.

    Verifies the CMS signature chain to one of ``roots`` (valid at ``genTime``), the
    time-stamping EKU of the signer and the imprint (SHA-256/384/512 of ``payload``).
    Returns ``genTime`` in milliseconds since the epoch. Raises :class:`TimestampError`.
    """
    from rfc3161_client import VerificationError, VerifierBuilder, decode_timestamp_response

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
        raise TimestampError(f"the time-stamp token does not verify ({exc})") from None
    gen = response.tst_info.gen_time
    if gen.tzinfo is None:
        gen = gen.replace(tzinfo=datetime.timezone.utc)
    return int(gen.timestamp() * 1000)
