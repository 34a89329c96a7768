"""``xinserve.v1.AuditService``: the auditor's read access to the audit log.

Callable only with the ``auditor`` role (enforced by the call pipeline); each call is itself
recorded, as an ``auditor_query`` event with its filter in the record's detail, or, for
``VerifyLog``, as an ``audit_verified`` event with the result.
"""

from __future__ import annotations

import json
import time

import grpc

from audit import AuditConfigError, AuditRangeError, QueryFilter, UnknownChainError
from audit.principals import display_safe
from audit.query import FilterError, query_filter
from audit.records import MAX_SAFE_INT
from audit.verify import ChainReport, VerifyReport
from service.core.audit_trail import AuditTrail
from service.core.call_context import CallRecord
from service.core.reasons import Reason
from service.core.status import FieldViolation, RpcError, invalid_argument, not_found
from service.operations.validation import Violations
from service.runtime.state import Runtime
from xinserve.v1 import audit_pb2, audit_pb2_grpc

_DEFAULT_LIMIT = 10_000
_MAX_LIMIT = 100_000
_EXPORT_CHUNK_BYTES = 256 * 1024


def _filter(request, info: CallRecord) -> QueryFilter:
    """The request's ``AuditFilter`` under the one filter rule (``audit.query.query_filter``,
    also the CLI's), with this API's paging bound (``limit`` at most ``_MAX_LIMIT``).

    Raises:
        RpcError: INVALID_ARGUMENT naming each bad ``filter.*`` field.
    """
    f = request.filter
    v = Violations()
    since = f.since_ms if f.HasField("since_ms") else None
    until = f.until_ms if f.HasField("until_ms") else None
    if f.limit > _MAX_LIMIT:
        v.add("filter.limit", f"at most {_MAX_LIMIT}")
    try:
        flt = query_filter(
            since_ms=since,
            until_ms=until,
            principal=f.principal or None,
            method=f.method or None,
            outcome=f.outcome or None,
            event=f.event or None,
            limit=f.limit or _DEFAULT_LIMIT,
        )
    except FilterError as exc:
        for field, message in exc.violations:
            v.add(f"filter.{field}", message)
        raise invalid_argument(v.items) from None
    v.raise_if_any()
    detail = info.audit_detail
    for key, value in (
        ("since_ms", since),
        ("until_ms", until),
        ("principal", display_safe(f.principal) if f.principal else None),
        ("method", flt.method),
        ("outcome", flt.outcome),
        ("event", flt.event),
        ("limit", flt.limit),
    ):
        if value is not None:
            detail[f"filter_{key}"] = value
    return flt


class AuditServicer(audit_pb2_grpc.AuditServiceServicer):
    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime

    def _trail(self) -> AuditTrail:
        if self._rt.audit is None:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION, "this server has no audit log", Reason.AUDIT_DISABLED)
        return self._rt.audit

    def _log(self):
        return self._trail().log

    async def QueryRecords(self, request, context):
        flt = _filter(request, context.call)
        for row in await self._log().query(flt):
            yield audit_pb2.QueryRecordsResponse(
                chain=row.chain,
                seq=row.seq,
                time_ms=row.time_ms,
                event=row.event,
                principal=row.principal or "",
                method=row.method or "",
                outcome=row.outcome,
                canonical=row.body,
                chain_hash=row.hash.hex(),
            )

    async def ExportRecords(self, request, context):
        flt = _filter(request, context.call)
        buffer: list[bytes] = []
        size = 0
        async for obj in self._log().stream(flt):
            line = json.dumps(obj, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n"
            buffer.append(line)
            size += len(line)
            if size >= _EXPORT_CHUNK_BYTES:
                yield audit_pb2.ExportRecordsResponse(jsonl=b"".join(buffer))
                buffer, size = [], 0
        if buffer:
            yield audit_pb2.ExportRecordsResponse(jsonl=b"".join(buffer))

    async def GetLatestCheckpoint(self, request, context):
        trail = self._trail()
        cp = trail.log.latest_checkpoint
        if cp is None:
            raise RpcError(grpc.StatusCode.NOT_FOUND, "no checkpoint has been written yet", Reason.NO_CHECKPOINT)
        return audit_pb2.GetLatestCheckpointResponse(
            payload=cp.payload,
            signature=cp.signature,
            key_id=trail.public_key.key_id,
            public_key_pem=trail.public_key.to_pem().decode("ascii"),
        )

    async def VerifyLog(self, request, context):
        v = Violations()
        start = request.from_seq if request.HasField("from_seq") else None
        end = request.to_seq if request.HasField("to_seq") else None
        for name, value in (("from_seq", start), ("to_seq", end)):
            if value is not None and not 1 <= value <= MAX_SAFE_INT:
                v.add(name, f"must be between 1 and {MAX_SAFE_INT}")
        if start is not None and end is not None and end < start:
            v.add("to_seq", "must be >= from_seq")
        if len(request.chain) > 512:
            v.add("chain", "is longer than 512 characters")
        v.raise_if_any()
        detail = context.call.audit_detail
        for key, value in (("chain", request.chain or None), ("from_seq", start), ("to_seq", end)):
            if value is not None:
                detail[f"range_{key}"] = value
        try:
            report: VerifyReport = await self._log().verify(
                chain=request.chain or None, start=start, end=end, now_ms=int(time.time() * 1000)
            )
        except AuditConfigError as exc:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION, str(exc), Reason.AUDIT_NO_VERIFY_KEY) from None
        except UnknownChainError as exc:
            raise not_found("chain", request.chain, Reason.AUDIT_CHAIN_NOT_FOUND) from exc
        except AuditRangeError as exc:  # past the end of the chain: a usage error, not tampering
            raise invalid_argument([FieldViolation("from_seq", str(exc))]) from None
        detail["verified_ok"] = report.ok
        detail["records_checked"] = report.records_checked
        broken = [c for c in report.chains if not c.ok]
        if broken:
            detail["first_broken"] = f"{broken[0].chain}:{broken[0].first_broken}"
        return audit_pb2.VerifyLogResponse(
            ok=report.ok, records_checked=report.records_checked, chains=[_chain_result(c) for c in report.chains]
        )


def _chain_result(c: ChainReport) -> audit_pb2.ChainVerification:
    return audit_pb2.ChainVerification(
        chain=c.chain,
        ok=c.ok,
        first_broken_seq=c.first_broken,
        records_checked=c.records_checked,
        last_checkpoint=c.last_checkpoint or 0,
        last_checkpoint_time_ms=c.last_checkpoint_time_ms or 0,
        unsigned_tail=c.unsigned_tail,
        recoveries=c.recoveries,
        purges=c.purges,
        problems=[
            audit_pb2.VerificationProblem(kind=p.kind, message=p.message, seq=p.seq, checkpoint=p.checkpoint)
            for p in c.problems
        ],
    )
