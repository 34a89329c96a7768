"""A call that started leaves a trace even if the process dies before its end record: the
``rpc_begin`` record (``service.core.audit_trail.AuditTrail.record_begin``) is durable on return."""

from __future__ import annotations

from pathlib import Path

from audit_helpers import Backend

from audit.content import ContentCapture
from audit.log import AuditLog
from audit.records import EventType, parse_body
from audit.stores.sqlite import SqliteStore
from audit.verify import verify_store
from service.core.audit_trail import AuditTrail
from service.core.call_context import CallInfo, Principal


async def test_a_begun_call_survives_a_crash_before_its_end(sqlite_backend: Backend, key, tmp_path: Path) -> None:
    log = await AuditLog.open(sqlite_backend.settings(), key, start_ticker=False)
    trail = AuditTrail(log, ContentCapture.from_settings(sqlite_backend.settings()), key.public_key())
    call = CallInfo(
        method="/xinserve.v1.InferenceService/GenerateStream",
        peer="ipv4:10.0.0.7:40000",
        request_id="req-streaming-1",
        trace_id=None,
        principal=Principal("teller-7", "token"),
        model="tiny-llama",
    )
    await trail.record_begin(call)
    await log.abort()  # the process dies mid-stream: no end record, no closing checkpoint

    log = await AuditLog.open(sqlite_backend.settings(), key, start_ticker=False)  # recovery
    await log.close()
    with SqliteStore(sqlite_backend.path, readonly=True) as store:
        assert verify_store(store, [key.public_key()]).ok
        bodies = [parse_body(r.body) for r in store.records("node-a", 1, 100)]
    begins = [b for b in bodies if b["event"] == EventType.RPC_BEGIN]
    assert len(begins) == 1
    begin = begins[0]
    assert begin["request_id"] == "req-streaming-1" and begin["principal"] == "teller-7"
    assert begin["method"].endswith("/GenerateStream") and begin["model"] == "tiny-llama"
    assert not [b for b in bodies if b["event"] == EventType.RPC]  # the end never came
