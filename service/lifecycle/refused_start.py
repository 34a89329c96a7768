"""Record a start refused for the running image's signature in the audit log that already exists.

The image check runs before the audit log is opened, so that a start refused for it creates
nothing under ``data_dir`` (no key, no database) on a host that has never run the server. When
the audit store already exists (an earlier start made the server's key and, for SQLite, the
database file; for PostgreSQL the key is the sign of an earlier start), the refusal is recorded
there as a ``start`` event with outcome ``FAILED_PRECONDITION`` — the same shape as a refused
model's ``model_verified`` event — and the log is closed again (closing checkpoint). Detail:
``refused`` = ``image_signature``, ``reason`` (a ``trust.errors.Reason`` code, ``no_trust_store``
or ``signature_unreadable``), ``image_digest`` (the digest the operator gave for the running
image), ``signed_digest`` (the sha256 digest the envelope's statement names, read without
trusting it, absent when unreadable), plus ``version``, ``node_id`` and ``pid`` as in a
successful ``start``. On a first start nothing is recorded: the refusal is on stderr, in the
structured log, and in the exit status (5).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

from audit import EventType
from audit.config import AuditSettings, StoreKind
from service.core.audit_trail import AuditTrail
from service.core.logs import get_logger
from service.frontends.grpc.server_servicer import server_version
from service.settings.config import Settings

log = get_logger("xinserve.server")

REFUSED_IMAGE = "image_signature"


def audit_store_exists(cfg: AuditSettings) -> bool:
    """Whether an earlier start left an audit store to record in (opening it creates nothing)."""
    if cfg.signing_key_path is None or not cfg.signing_key_path.is_file():
        return False
    if cfg.store is StoreKind.SQLITE:
        return cfg.path.is_file()
    return True


async def record_refused_start(
    settings: Settings,
    open_audit: Callable[[Settings], Awaitable[AuditTrail]],
    detail: dict[str, Any],
) -> bool:
    """Append a refused ``start`` event with ``detail`` to the existing audit log; True if recorded.

    Never raises for the audit side (a log that cannot be opened or written is logged as
    ``refused_start_not_audited``): the refusal itself stands either way.
    """
    if not audit_store_exists(settings.audit):
        log.warning("refused_start_not_audited", audit_error="no audit store yet (first start)", **detail)
        return False
    try:
        trail = await open_audit(settings)
    except Exception as exc:  # AuditOpenFailed and anything the store raises: the start is refused anyway
        log.error("refused_start_not_audited", audit_error=str(exc)[:300], **detail)
        return False
    try:
        await trail.event(
            EventType.START,
            "FAILED_PRECONDITION",
            version=server_version(),
            node_id=settings.audit.node_id,
            pid=os.getpid(),
            **detail,
        )
    finally:
        await trail.close()
    log.info("refused_start_audited", **detail)
    return True
