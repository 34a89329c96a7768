"""Start-up checks that refuse a start before anything is served: the running image's
signature (``verify_running_image``), a writable ``data_dir`` (``data_dir_ok``), and the
warning when no off-host anchor protects the audit log (``warn_without_anchor``). The
exceptions a refused start raises carry its exit code (``service.lifecycle.exit_codes``).
"""

from __future__ import annotations

import os
from pathlib import Path

from service.core.logs import get_logger
from service.lifecycle.exit_codes import ExitCode
from service.lifecycle.refused_start import REFUSED_IMAGE
from service.settings.config import Settings
from trust.errors import VerificationError
from trust.image_signing import signed_digest_unverified, verify_image
from trust.trust_store import TrustStore

log = get_logger("xinserve.server")


class StartupRefused(Exception):
    """A fail-closed check at start failed (e.g. the running image's signature). Safe to print."""

    exit_code = ExitCode.REFUSED


class ImageRefused(StartupRefused):
    """The running image's signature did not verify; ``audit_detail`` is what the refused
    ``start`` event records (``service.lifecycle.refused_start``)."""

    def __init__(self, message: str, **audit_detail: str | None) -> None:
        super().__init__(message)
        self.audit_detail = {"refused": REFUSED_IMAGE, **audit_detail}


def warn_without_anchor(settings: Settings) -> None:
    """Log a warning at start when no off-host anchor protects the audit log (``audit.syslog``
    unset): rollback, wipe and a rewrite with the key then go undetected (docs/audit.md,
    *Production posture*)."""
    posture = settings.audit.anchor_posture
    if posture == "syslog":
        return
    log.warning(
        "AUDIT_LOG_WITHOUT_OFF_HOST_ANCHOR",
        anchor=posture,
        anchor_waiver=settings.audit.anchor_waiver,
        note="a rolled-back, wiped or rewritten audit log cannot be detected; production: set audit.syslog "
        "and audit.require_anchor = true (docs/audit.md, Production posture)",
    )


def verify_running_image(settings: Settings, store: TrustStore | None) -> None:
    """If an image signature and the running digest are configured, they must verify.

    This proves only that the signature covers ``trust.image_digest`` as given; whether the
    process runs from that image is the runtime's word, not observable here (docs/signing.md).

    Raises:
        ImageRefused: no trust store, unreadable envelope, or the signature does not verify.
    """
    t = settings.trust
    if t.image_signature_file is None or t.image_digest is None:
        return
    if store is None:
        raise ImageRefused(
            "an image signature is configured but no trust store (trust.trust_store_dir)",
            reason="no_trust_store",
            image_digest=t.image_digest,
        )
    try:
        envelope = t.image_signature_file.read_bytes()
    except OSError as exc:
        raise ImageRefused(
            f"cannot read the image signature: {exc.strerror}",
            reason="signature_unreadable",
            image_digest=t.image_digest,
        ) from None
    try:
        result = verify_image(envelope, store, t.image_digest)
    except VerificationError as exc:
        raise ImageRefused(
            f"the running image {t.image_digest} does not verify: {exc}",
            reason=exc.reason.value,
            image_digest=t.image_digest,
            signed_digest=signed_digest_unverified(envelope),
        ) from None
    log.info("image_verified", digest=result.digest, key_id=result.key_id)


def data_dir_ok(path: Path) -> bool:
    """Whether ``path`` is a writable directory, or could be created as one (its nearest
    existing ancestor is a writable directory). Creates nothing: the directory is made when
    the audit log or the built-in models first need it."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    return probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)
