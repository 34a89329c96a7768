"""The server's side of the audit log: one record per RPC and per system event.

Wraps ``audit.AuditLog``. A call's record is appended, and durable (group commit), before the
call completes at the client: unary responses and stream ends wait for it, error statuses are
sent after it. With the default ``fail_closed`` policy a store that cannot be written makes
inference calls fail with UNAVAILABLE (and new ones refused at once) until it recovers.
Health checks and reflection are not audited (probes every few seconds would drown the log);
every ``xinserve.v1`` call is, including refused, unauthenticated, invalid and cancelled ones.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import grpc

from audit import (
    AuditEncodingError,
    AuditLog,
    AuditRecord,
    AuditUnavailable,
    ContentCapture,
    EventType,
    FailurePolicy,
)
from service.core.call_context import CallInfo
from service.core.logs import get_logger
from service.core.reasons import Reason
from service.core.status import RpcError
from trust.sm2 import Sm2PublicKey

log = get_logger("xinserve.audit")

_AUDIT_SERVICE = "/xinserve.v1.AuditService/"
_VERIFY_LOG = _AUDIT_SERVICE + "VerifyLog"


def event_of(method: str) -> EventType:
    """The event type of a call's record: the auditor's own calls are marked as such.

    ``AuditService/VerifyLog`` -> ``audit_verified``; other ``AuditService`` calls (queries,
    exports, checkpoint reads), refused ones included -> ``auditor_query``; anything else -> ``rpc``.
    """
    if method == _VERIFY_LOG:
        return EventType.AUDIT_VERIFIED
    if method.startswith(_AUDIT_SERVICE):
        return EventType.AUDITOR_QUERY
    return EventType.RPC


def audit_unavailable() -> RpcError:
    return RpcError(
        grpc.StatusCode.UNAVAILABLE,
        "the audit log cannot be written; calls are refused until it recovers (fail-closed)",
        Reason.AUDIT_UNAVAILABLE,
        retry_after_s=5.0,
    )


def _call_record(info: CallInfo, event: EventType, **fields: Any) -> AuditRecord:
    """A call's record: who (principal, auth method, client certificate, peer), what (method,
    model and its manifest digest) and which call (request and trace ids), plus ``fields``."""
    return AuditRecord(
        event=event,
        principal=info.principal.name or None,
        auth_method=info.principal.auth_method,
        cert_fingerprint=info.principal.cert_fingerprint,
        cert_subject=info.principal.cert_subject,
        peer=info.peer or None,
        method=info.method,
        model=info.model,
        manifest_digest=info.manifest_digest,
        request_id=info.request_id,
        trace_id=info.trace_id,
        **fields,
    )


class AuditTrail:
    """Appends RPC and system-event records to an open ``AuditLog``."""

    def __init__(self, audit_log: AuditLog, capture: ContentCapture, public_key: Sm2PublicKey) -> None:
        self.log = audit_log
        self.public_key = public_key
        """The key that verifies this server's checkpoints (auditors pin its key id)."""
        self._capture = capture
        settings = audit_log.settings
        self._fail_closed = settings is None or settings.failure_policy is FailurePolicy.FAIL_CLOSED

    def check_writable(self) -> None:
        """Raise UNAVAILABLE at once when the store is down and the policy is fail-closed."""
        if self._fail_closed and not self.log.healthy:
            raise audit_unavailable()

    async def record_call(self, info: CallInfo, code: grpc.StatusCode) -> None:
        """Append the call's record (durable on return).

        Raises:
            RpcError: UNAVAILABLE when the record cannot be written under ``fail_closed``.
        """
        fields: dict[str, Any] = {}
        output = info.output_text()
        if info.prompt is not None or output is not None:
            fields = await asyncio.to_thread(self._capture.fields, info.prompt, output)
        record = _call_record(
            info,
            event_of(info.method),
            outcome=code.name,
            prompt_tokens=info.prompt_tokens or None,
            output_tokens=info.completion_tokens or None,
            latency_us=int((time.monotonic() - info.started) * 1_000_000),
            detail=info.audit_detail,
            **fields,
        )
        try:
            await self._append(record)
        except AuditEncodingError as exc:
            # A detail the canonical encoding refuses (the servicers validate what goes there;
            # this is the backstop) must not cost the call its record: keep it without them.
            log.error("audit_detail_not_encodable", method=info.method, error=str(exc))
            await self._append(dataclasses.replace(record, detail={"detail_dropped": True}))

    async def record_begin(self, info: CallInfo) -> None:
        """Append the call's ``rpc_begin`` record (durable on return; group-committed with others).

        For streamed and long calls, before their first output: if the process dies before the
        call's ``rpc`` record is written, the begin record (same ``request_id``) still shows who
        started what. Raises ``RpcError`` UNAVAILABLE like :meth:`record_call`.
        """
        await self._append(_call_record(info, EventType.RPC_BEGIN))

    async def event(self, event: EventType, outcome: str = "OK", **detail: Any) -> None:
        """Append a system event (start, stop, model_verified ...). Never raises: logs instead."""
        clean = {k: v for k, v in detail.items() if v is not None}
        model = clean.pop("model", None)
        digest = clean.pop("manifest_digest", None)
        try:
            await self._append(
                AuditRecord(event=event, outcome=outcome, model=model, manifest_digest=digest, detail=clean)
            )
        except RpcError:
            log.error("audit_event_not_recorded", audit_event=event.value)

    async def _append(self, record: AuditRecord) -> None:
        try:
            await asyncio.shield(self.log.append(record))
        except AuditUnavailable:
            log.error("audit_append_failed", method=record.method, audit_event=record.event.value)
            raise audit_unavailable() from None

    async def close(self) -> None:
        await self.log.close()
