"""Every xinserve.v1 call leaves exactly one durable audit record; the auditor reads them
through AuditService; a store that cannot be written makes inference fail closed."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid

import grpc
import pytest

from audit import AuditLog, ContentCapture, EventType, QueryFilter, decode_record
from service.access.auth import hash_token
from service.core.audit_trail import AuditTrail
from tests.conftest import TINY
from tests.server.frontends import extra_frontend
from tests.server.stubs import field_violations, stubs
from tests.support.full_disk import fill
from trust.sm2 import Sm2PrivateKey
from trust.sm3 import sm3_hex
from xinserve.v1 import audit_pb2, audit_pb2_grpc, inference_pb2, model_pb2, sampling_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")

USER = "user-token-0123456789abcdef"
AUDITOR = "auditor-token-0123456789abcdef"


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    path = tmp_path_factory.mktemp("audit-tokens") / "tokens"
    path.write_text(f"svc-user {hash_token(USER)} user\nauditor-ann {hash_token(AUDITOR)} auditor\n")
    path.chmod(0o600)
    return path


async def records_for(live_server, request_id: str, since_ms: int):
    rows = await live_server.runtime.audit.log.query(QueryFilter(since_ms=since_ms))
    out = []
    for row in rows:
        _, _, record = decode_record(row.body)
        if record.request_id == request_id:
            out.append(record)
    return out


def rid() -> str:
    return "audit-" + uuid.uuid4().hex[:12]


def long_sampling() -> sampling_pb2.SamplingParams:
    return sampling_pb2.SamplingParams(temperature=0.0, max_tokens=1500, ignore_eos=True)


async def test_one_record_per_call_for_each_outcome(api, live_server):
    since = int(time.time() * 1000) - 1000
    cases: dict[str, str] = {}

    ok = rid()
    reply = await api.inference.Generate(
        inference_pb2.GenerateRequest(
            model=TINY,
            prompt="audit me",
            request_id=ok,
            sampling_params=sampling_pb2.SamplingParams(max_tokens=4, temperature=0),
        )
    )
    cases[ok] = "OK"

    invalid = rid()
    with pytest.raises(grpc.aio.AioRpcError):
        await api.inference.Generate(
            inference_pb2.GenerateRequest(
                model=TINY, prompt="x", request_id=invalid, sampling_params=sampling_pb2.SamplingParams(top_p=5)
            )
        )
    cases[invalid] = "INVALID_ARGUMENT"

    missing = rid()
    with pytest.raises(grpc.aio.AioRpcError):
        await api.inference.Generate(inference_pb2.GenerateRequest(model="nope", prompt="x", request_id=missing))
    cases[missing] = "NOT_FOUND"

    deadline = rid()
    with pytest.raises(grpc.aio.AioRpcError):
        await api.inference.Generate(
            inference_pb2.GenerateRequest(model=TINY, prompt="x", request_id=deadline, sampling_params=long_sampling()),
            timeout=0.3,
        )
    cases[deadline] = "DEADLINE_EXCEEDED"

    cancelled = rid()
    call = api.inference.GenerateStream(
        inference_pb2.GenerateRequest(model=TINY, prompt="x", request_id=cancelled, sampling_params=long_sampling())
    )
    await call.read()
    call.cancel()
    cases[cancelled] = "CANCELLED"

    streamed = rid()
    async for _ in api.inference.GenerateStream(
        inference_pb2.GenerateRequest(
            model=TINY,
            prompt="stream",
            request_id=streamed,
            sampling_params=sampling_pb2.SamplingParams(max_tokens=3, temperature=0),
        )
    ):
        pass
    cases[streamed] = "OK"

    # The cancelled and timed-out calls' records are written after their clients left: wait for
    # every call's final record (a condition, not a fixed pause; generous for a loaded machine).
    for _ in range(600):
        found = {r: await records_for(live_server, r, since) for r in cases}
        if all(recs and recs[-1].event == "rpc" for recs in found.values()):
            break
        await asyncio.sleep(0.1)
    for request_id, outcome in cases.items():
        recs = await records_for(live_server, request_id, since)
        # A call that reached the engine has its begin record first (written before output).
        # The 0.3 s deadline may strike before the call reaches the engine on a loaded machine:
        # then there is no begin record, which the protocol allows.
        begun = outcome not in ("INVALID_ARGUMENT", "NOT_FOUND")
        events = [r.event for r in recs[:-1]]
        if outcome == "DEADLINE_EXCEEDED":
            assert events in ([], ["rpc_begin"]), (request_id, recs)
        else:
            assert events == (["rpc_begin"] if begun else []), (request_id, recs)
        recs = recs[-1:]
        assert recs[0].outcome == outcome
        assert recs[0].event == "rpc"
        assert recs[0].principal == "anonymous"
        assert recs[0].latency_us is not None and recs[0].latency_us > 0
    good = (await records_for(live_server, ok, since))[-1]
    assert good.method == "/xinserve.v1.InferenceService/Generate"
    assert good.model == TINY
    assert good.manifest_digest and good.manifest_digest.startswith("sm3:")
    assert good.prompt_sm3 == sm3_hex(b"audit me")
    assert good.output_sm3 == sm3_hex(reply.outputs[0].text.encode("utf-8"))
    assert good.output_tokens == 4
    assert good.content is None  # content capture is opt-in


async def test_auditor_reads_the_log_and_is_itself_audited(live_server, tokens):
    overrides = {"listen": {"plaintext": ["127.0.0.1:0"]}, "auth": {"token_file": str(tokens)}}
    async with extra_frontend(live_server, overrides, audit=live_server.runtime.audit) as (_, _, port):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            auditor = (("authorization", f"Bearer {AUDITOR}"),)
            user = (("authorization", f"Bearer {USER}"),)
            svc = audit_pb2_grpc.AuditServiceStub(channel)
            await stubs(channel).models.ListModels(model_pb2.ListModelsRequest(), metadata=user)
            flt = audit_pb2.AuditFilter(principal="svc-user", method="/xinserve.v1.ModelService/ListModels")
            rows = [r async for r in svc.QueryRecords(audit_pb2.QueryRecordsRequest(filter=flt), metadata=auditor)]
            assert rows and all(r.principal == "svc-user" for r in rows)
            assert rows[-1].canonical.startswith(b"{") and len(rows[-1].chain_hash) == 64

            chunks = [
                c.jsonl async for c in svc.ExportRecords(audit_pb2.ExportRecordsRequest(filter=flt), metadata=auditor)
            ]
            lines = b"".join(chunks).splitlines()
            assert len(lines) == len(rows)

            cp = await svc.GetLatestCheckpoint(audit_pb2.GetLatestCheckpointRequest(), metadata=auditor)
            from trust.sm2 import Sm2PublicKey

            key = Sm2PublicKey.from_pem(cp.public_key_pem.encode())
            key.verify(cp.signature, cp.payload)  # raises if the checkpoint signature is bad
            assert key.key_id == cp.key_id

            for metadata, code in ((user, grpc.StatusCode.PERMISSION_DENIED), ((), grpc.StatusCode.UNAUTHENTICATED)):
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await svc.GetLatestCheckpoint(audit_pb2.GetLatestCheckpointRequest(), metadata=metadata)
                assert err.value.code() == code

            since = int(time.time() * 1000) - 60_000
            own = await live_server.runtime.audit.log.query(
                QueryFilter(since_ms=since, method="/xinserve.v1.AuditService/QueryRecords")
            )
            assert any(decode_record(r.body)[2].detail.get("filter_principal") == "svc-user" for r in own)
            refused = await live_server.runtime.audit.log.query(
                QueryFilter(
                    since_ms=since, method="/xinserve.v1.AuditService/GetLatestCheckpoint", outcome="PERMISSION_DENIED"
                )
            )
            assert refused, "a refused auditor call is audited too"
            assert all(decode_record(r.body)[2].event is EventType.AUDITOR_QUERY for r in [*own, *refused])


async def test_verify_log_rpc_reports_a_modified_record_and_is_recorded(live_server, tokens, tmp_path):
    from audit import AuditSettings

    key = Sm2PrivateKey.generate()
    settings = AuditSettings(path=tmp_path / "audit.db", node_id="verify-node", retention_enabled=False)
    audit_log = await AuditLog.open(settings, signer=key, start_ticker=False)
    trail = AuditTrail(audit_log, ContentCapture(), key.public_key())
    overrides = {"listen": {"plaintext": ["127.0.0.1:0"]}, "auth": {"token_file": str(tokens)}}
    try:
        async with extra_frontend(live_server, overrides, audit=trail) as (_, _, port):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                auditor = (("authorization", f"Bearer {AUDITOR}"),)
                user = (("authorization", f"Bearer {USER}"),)
                svc = audit_pb2_grpc.AuditServiceStub(channel)
                for _ in range(5):
                    await stubs(channel).models.ListModels(model_pb2.ListModelsRequest(), metadata=user)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await svc.VerifyLog(audit_pb2.VerifyLogRequest(), metadata=user)
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
                for bad, field in (
                    (audit_pb2.VerifyLogRequest(from_seq=5, to_seq=2), "to_seq"),
                    (audit_pb2.VerifyLogRequest(from_seq=2**60), "from_seq"),  # beyond the records' JSON range
                ):
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await svc.VerifyLog(bad, metadata=auditor)
                    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                    assert set(field_violations(err.value)) == {field}
                huge = audit_pb2.AuditFilter(until_ms=2**62)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    _ = [
                        r async for r in svc.QueryRecords(audit_pb2.QueryRecordsRequest(filter=huge), metadata=auditor)
                    ]
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert set(field_violations(err.value)) == {"filter.until_ms"}

                good = await svc.VerifyLog(audit_pb2.VerifyLogRequest(), metadata=auditor)
                assert good.ok and good.records_checked >= 6
                assert [c.chain for c in good.chains] == ["verify-node"] and not good.chains[0].problems

                # An insider edits one stored record (who made the third call).
                row = (await audit_log.query(QueryFilter(principal="svc-user")))[2]
                forged = row.body.replace(b'"svc-user"', b'"svc-uzer"')
                assert forged != row.body
                with sqlite3.connect(settings.path) as db:
                    db.execute("UPDATE audit_records SET body = ? WHERE seq = ?", (forged, row.seq))
                bad = await svc.VerifyLog(audit_pb2.VerifyLogRequest(), metadata=auditor)
                assert not bad.ok
                assert bad.chains[0].first_broken_seq == row.seq
                assert any(p.seq == row.seq for p in bad.chains[0].problems)
                # A typo'd chain, or a range past the end, is the caller's mistake, not a verdict.
                for request, code in (
                    (audit_pb2.VerifyLogRequest(chain="no-such-node"), grpc.StatusCode.NOT_FOUND),
                    (audit_pb2.VerifyLogRequest(from_seq=100_000), grpc.StatusCode.INVALID_ARGUMENT),
                ):
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await svc.VerifyLog(request, metadata=auditor)
                    assert err.value.code() == code, err.value.details()
    finally:
        await audit_log.close()

    rows = await audit_log.query(QueryFilter(event="audit_verified"))
    results = [(r.outcome, decode_record(r.body)[2].detail) for r in rows]
    assert [(o, d.get("verified_ok")) for o, d in results] == [
        ("PERMISSION_DENIED", None),
        ("INVALID_ARGUMENT", None),
        ("INVALID_ARGUMENT", None),
        ("OK", True),
        ("OK", False),
        ("NOT_FOUND", None),
        ("INVALID_ARGUMENT", None),
    ]
    assert results[4][1]["first_broken"] == f"verify-node:{row.seq}"


async def test_a_detail_the_encoding_refuses_does_not_cost_the_record(tmp_path):
    # Before the backstop, an out-of-range detail raised AuditEncodingError out of the call
    # pipeline: the client got INTERNAL and the call had no record at all.
    from audit import AuditSettings
    from service.core.call_context import CallInfo

    key = Sm2PrivateKey.generate()
    settings = AuditSettings(path=tmp_path / "audit.db", node_id="n", retention_enabled=False)
    audit_log = await AuditLog.open(settings, signer=key, start_ticker=False)
    trail = AuditTrail(audit_log, ContentCapture(), key.public_key())
    info = CallInfo(
        method="/xinserve.v1.AuditService/QueryRecords", peer="ipv4:127.0.0.1:1", request_id="r-1", trace_id=None
    )
    info.audit_detail["filter_until_ms"] = 2**62
    try:
        await trail.record_call(info, grpc.StatusCode.OK)
    finally:
        await audit_log.close()
    (row,) = await audit_log.query(QueryFilter(event="auditor_query"))
    record = decode_record(row.body)[2]
    assert record.request_id == "r-1" and record.outcome == "OK"
    assert dict(record.detail) == {"detail_dropped": True}


async def test_full_audit_disk_fails_closed_then_recovers(live_server, tiny_fs):
    from audit import AuditSettings

    key = Sm2PrivateKey.generate()
    settings = AuditSettings(path=tiny_fs / "audit.db", node_id="tiny", retention_enabled=False, retry_interval_s=0.2)
    audit_log = await AuditLog.open(settings, signer=key, start_ticker=False)
    trail = AuditTrail(audit_log, ContentCapture(), key.public_key())
    overrides = {"listen": {"plaintext": ["127.0.0.1:0"]}}
    async with extra_frontend(live_server, overrides, audit=trail) as (_, _, port):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            api = stubs(channel)
            request = inference_pb2.GenerateRequest(
                model=TINY, prompt="fill " * 200, sampling_params=sampling_pb2.SamplingParams(max_tokens=1)
            )
            await api.inference.Generate(request)
            filler = fill(tiny_fs)
            codes = []
            for _ in range(50):
                try:
                    await api.inference.Generate(request)
                    codes.append(grpc.StatusCode.OK)
                except grpc.aio.AioRpcError as err:
                    codes.append(err.code())
                    assert err.code() == grpc.StatusCode.UNAVAILABLE
                    assert "audit" in err.details()
                    break
            assert codes[-1] == grpc.StatusCode.UNAVAILABLE, "the audit disk never filled up"
            with pytest.raises(grpc.aio.AioRpcError) as err:  # refused at once while the store is down
                await api.inference.Generate(request)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            filler.unlink()
            for _ in range(100):  # the log probes the store and recovers
                try:
                    await api.inference.Generate(request)
                    break
                except grpc.aio.AioRpcError:
                    await asyncio.sleep(0.1)
            else:
                pytest.fail("the server did not recover after the audit disk had room again")
    await audit_log.close()


async def test_cancelled_auditor_stream_has_exactly_one_record(live_server, tokens):
    # Before the fix, a cancel that arrived while the finished stream's OK record was being
    # written produced a second, CANCELLED record for the same call (13 of 20 tries).
    overrides = {"listen": {"plaintext": ["127.0.0.1:0"]}, "auth": {"token_file": str(tokens)}}
    since = int(time.time() * 1000) - 1000
    ids = [f"cancel-query-{i}-{uuid.uuid4().hex[:8]}" for i in range(20)]
    async with extra_frontend(live_server, overrides, audit=live_server.runtime.audit) as (_, _, port):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            svc = audit_pb2_grpc.AuditServiceStub(channel)
            few = audit_pb2.QueryRecordsRequest(filter=audit_pb2.AuditFilter(limit=3))
            for rid in ids:
                metadata = (("authorization", f"Bearer {AUDITOR}"), ("x-request-id", rid))
                call = svc.QueryRecords(few, metadata=metadata)
                await call.read()
                call.cancel()
    await asyncio.sleep(0.5)  # a second record, if any, is written right after the cancel
    rows = await live_server.runtime.audit.log.query(QueryFilter(since_ms=since, event="auditor_query"))
    counts: dict[str, int] = {}
    for row in rows:
        rid = decode_record(row.body)[2].request_id
        counts[rid] = counts.get(rid, 0) + 1
    assert {rid: counts.get(rid, 0) for rid in ids} == dict.fromkeys(ids, 1)


async def test_every_call_gets_a_request_id_and_a_bad_one_is_refused_everywhere(live_server, tokens):
    overrides = {"listen": {"plaintext": ["127.0.0.1:0"]}, "auth": {"token_file": str(tokens)}}
    since = int(time.time() * 1000) - 1000
    async with extra_frontend(live_server, overrides, audit=live_server.runtime.audit) as (_, _, port):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            api = stubs(channel)
            user = (("authorization", f"Bearer {USER}"),)
            tokenize = inference_pb2.TokenizeRequest(model=TINY, text="id me")
            # Before the fix these calls dropped a bad x-request-id silently.
            bad_calls = (
                api.inference.Tokenize(tokenize, metadata=(*user, ("x-request-id", "has space"))),
                audit_pb2_grpc.AuditServiceStub(channel).GetLatestCheckpoint(
                    audit_pb2.GetLatestCheckpointRequest(),
                    metadata=(("authorization", f"Bearer {AUDITOR}"), ("x-request-id", "y" * 129)),
                ),
                # Two ids: which one would the caller's logs hold? (The first one used to win.)
                api.inference.Tokenize(tokenize, metadata=(*user, ("x-request-id", "a-1"), ("x-request-id", "b-2"))),
            )
            for bad in bad_calls:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await bad
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert set(field_violations(err.value)) == {"x-request-id"}
            await api.inference.Tokenize(tokenize, metadata=user)  # no id sent: one is generated
    rows = await live_server.runtime.audit.log.query(
        QueryFilter(since_ms=since, method="/xinserve.v1.InferenceService/Tokenize", outcome="OK")
    )
    (record,) = [decode_record(r.body)[2] for r in rows if decode_record(r.body)[2].principal == "svc-user"]
    assert record.request_id is not None and len(record.request_id) == 32


async def test_unknown_method_is_unimplemented_and_audited(live_server):
    since = int(time.time() * 1000) - 1000
    async with grpc.aio.insecure_channel(live_server.target) as channel:
        probe = channel.unary_unary("/xinserve.v1.AuditService/DropAllRecords")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await probe(b"", metadata=(("x-request-id", "probe-1"),))
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        stream_probe = channel.stream_stream("/no.such.Service/Anything")
        call = stream_probe(metadata=(("x-request-id", "probe-2"),))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call.read()
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    rows = await live_server.runtime.audit.log.query(QueryFilter(since_ms=since, outcome="UNIMPLEMENTED"))
    by_id = {r.request_id: r for r in (decode_record(row.body)[2] for row in rows)}
    assert by_id["probe-1"].method == "/xinserve.v1.AuditService/DropAllRecords"
    assert by_id["probe-2"].method == "/no.such.Service/Anything"


async def test_filter_typos_are_refused_not_answered_with_nothing(live_server, tokens):
    # A typo must not read as "no such records" (case alone is no typo: "ok" is OK).
    overrides = {"listen": {"plaintext": ["127.0.0.1:0"]}, "auth": {"token_file": str(tokens)}}
    async with extra_frontend(live_server, overrides, audit=live_server.runtime.audit) as (_, _, port):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            svc = audit_pb2_grpc.AuditServiceStub(channel)
            auditor = (("authorization", f"Bearer {AUDITOR}"),)
            flt = audit_pb2.AuditFilter(outcome="okay", event="bogus")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                _ = [r async for r in svc.QueryRecords(audit_pb2.QueryRecordsRequest(filter=flt), metadata=auditor)]
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert set(field_violations(err.value)) == {"filter.outcome", "filter.event"}
            good = audit_pb2.AuditFilter(outcome="OK", event="config_loaded")
            rows = [r async for r in svc.QueryRecords(audit_pb2.QueryRecordsRequest(filter=good), metadata=auditor)]
            assert rows and all(r.event == "config_loaded" for r in rows)


async def test_a_log_with_a_mistyped_stored_value_refuses_start_without_a_traceback(tmp_path):
    # Before the fix, `UPDATE audit_records SET seq = 'abc'` made `xinserve serve` die with a
    # Python traceback and exit 1 instead of refusing to start (exit 6, EXIT_AUDIT).
    from service.lifecycle.server import AuditOpenFailed, open_audit
    from service.settings.config import load_settings

    settings = load_settings(overrides={"data_dir": str(tmp_path), "audit": {"node_id": "n"}})
    trail = await open_audit(settings)
    await trail.event(EventType.DRAIN)
    await trail.close()
    with sqlite3.connect(settings.audit.path) as db:
        db.execute("UPDATE audit_records SET seq = 'abc' WHERE seq = (SELECT max(seq) FROM audit_records)")
    # The readers cast every column: the altered value no longer matches the signed checkpoint.
    with pytest.raises(AuditOpenFailed, match=r"cannot be opened.*audit verify") as err:
        await open_audit(settings)
    assert err.value.exit_code == 6
