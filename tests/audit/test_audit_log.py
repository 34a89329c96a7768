"""AuditLog on both stores: group commit, durability, checkpoints, reopen, several writers, queries."""

from __future__ import annotations

import asyncio

import pytest
from audit_helpers import Backend, rpc_record_factory

from audit.chain import CheckpointKind
from audit.errors import AuditConfigError, WriterConflict
from audit.log import AuditLog
from audit.records import AuditRecord, EventType, decode_record
from audit.stores import QueryFilter, open_store
from audit.verify import verify_store


async def test_concurrent_appends_are_all_durable_and_grouped(backend: Backend, key) -> None:
    settings = backend.settings()
    log = await AuditLog.open(settings, key, start_ticker=False)
    commits = 0
    real_write = log._store.write  # type: ignore[union-attr]

    def counting_write(records, checkpoints):
        nonlocal commits
        commits += 1
        return real_write(records, checkpoints)

    log._store.write = counting_write  # type: ignore[union-attr,method-assign]
    make = rpc_record_factory()
    n = 3000
    seqs = await asyncio.gather(*(log.append(make(i)) for i in range(n)))
    assert sorted(seqs) == list(range(1, n + 1))
    assert commits < n / 10, f"group commit: {commits} transactions for {n} appends"
    await log.close()

    with open_store(settings) as store:
        assert store.bounds("node-a") == (1, n)
        rows = list(store.records("node-a", 1, n))
        ids = {decode_record(r.body)[2].request_id for r in rows}
        assert ids == {f"req-{i}" for i in range(n)}
        report = verify_store(store, [key.public_key()])
    assert report.ok, report.to_json()
    assert report.records_checked == n
    assert report.chains[0].closed


async def test_idle_log_writes_periodic_checkpoints(backend: Backend, key) -> None:
    settings = backend.settings(checkpoint_interval_s=1)
    log = await AuditLog.open(settings, key)
    await asyncio.sleep(3.5)
    await log.close()
    with open_store(settings) as store:
        kinds = [c.checkpoint.kind for c in store.checkpoints("node-a")]
    assert kinds[0] is CheckpointKind.OPEN and kinds[-1] is CheckpointKind.CLOSE
    assert kinds.count(CheckpointKind.PERIODIC) >= 2


async def test_reopen_continues_the_chain(backend: Backend, key, clock) -> None:
    settings = backend.settings()
    make = rpc_record_factory(clock)
    for round_ in range(3):
        log = await AuditLog.open(settings, key, clock=clock, start_ticker=False)
        assert log.recovery is not None and not log.recovery.unclean_shutdown
        for i in range(10):
            assert await log.append(make(i)) == round_ * 10 + i + 1
        clock.advance(seconds=5)
        await log.close()
        clock.advance(days=1)
    with open_store(settings) as store:
        report = verify_store(store, [key.public_key()], now_ms=clock())
        kinds = [c.checkpoint.kind for c in store.checkpoints("node-a")]
    assert report.ok, report.to_json()
    assert kinds == [CheckpointKind.OPEN, CheckpointKind.CLOSE] * 3


async def test_one_writer_per_chain(backend: Backend, key) -> None:
    settings = backend.settings(writer_lock_wait_s=0.5)
    log = await AuditLog.open(settings, key, start_ticker=False)
    try:
        with pytest.raises(WriterConflict):
            await AuditLog.open(settings, key, start_ticker=False)
    finally:
        await log.close()


async def test_several_writers_share_one_store(backend: Backend, key) -> None:
    if backend.kind == "sqlite":
        pytest.skip("the embedded store has one writer; replicas share PostgreSQL")
    logs = [await AuditLog.open(backend.settings(node_id=f"replica-{i}"), key, start_ticker=False) for i in range(3)]
    make = rpc_record_factory()
    await asyncio.gather(*(lg.append(make(i)) for i in range(300) for lg in logs))
    await asyncio.gather(*(lg.close() for lg in logs))
    with open_store(backend.settings()) as store:
        assert store.chains() == ["replica-0", "replica-1", "replica-2"]
        report = verify_store(store, [key.public_key()])
    assert report.ok, report.to_json()
    assert [c.records_checked for c in report.chains] == [300, 300, 300]


async def test_query_filters(backend: Backend, key, clock) -> None:
    settings = backend.settings()
    log = await AuditLog.open(settings, key, clock=clock, start_ticker=False)
    make = rpc_record_factory(clock)
    t0 = clock()
    for i in range(30):
        outcome = "OK" if i % 5 else "PERMISSION_DENIED"
        method = "/xinserve.v1.InferenceService/Embed" if i % 2 else "/xinserve.v1.InferenceService/Generate"
        await log.append(make(i, outcome=outcome, method=method))
        clock.advance(seconds=1)
    await log.append(AuditRecord(event=EventType.MODEL_LOADED, model="m", time_ms=clock()))
    rows = await log.query(QueryFilter(principal="user-1"))
    assert {r.principal for r in rows} == {"user-1"} and len(rows) == 10
    rows = await log.query(QueryFilter(outcome="PERMISSION_DENIED"))
    assert len(rows) == 6
    rows = await log.query(QueryFilter(method="/xinserve.v1.InferenceService/Embed", since_ms=t0 + 10_000))
    assert len(rows) == 10 and all(r.time_ms >= t0 + 10_000 for r in rows)
    rows = await log.query(QueryFilter(since_ms=t0 + 5_000, until_ms=t0 + 8_000))
    assert [r.seq for r in rows] == [6, 7, 8]
    rows = await log.query(QueryFilter(event="model_loaded"))
    assert len(rows) == 1
    report = await log.verify(now_ms=clock())
    assert report.ok and report.records_checked == 31
    await log.close()


def test_retention_below_180_days_is_refused(backend: Backend) -> None:
    with pytest.raises(ValueError, match="at least 180"):
        backend.settings(retention_days=179)
    with pytest.raises(AuditConfigError):
        from audit.config import store_from_url

        store_from_url("")


async def test_stream_export(backend: Backend, key) -> None:
    log = await AuditLog.open(backend.settings(), key, start_ticker=False)
    make = rpc_record_factory()
    await asyncio.gather(*(log.append(make(i)) for i in range(1200)))
    got = [obj async for obj in log.stream(QueryFilter(principal="user-2"), chunk=100)]
    assert len(got) == 400 and {o["principal"] for o in got} == {"user-2"}
    assert all(set(o) >= {"chain", "seq", "hash", "time", "event", "outcome"} for o in got)
    # a consumer that stops early does not leave the producer thread blocked
    agen = log.stream(QueryFilter(), chunk=10)
    first = [await agen.__anext__() for _ in range(3)]
    await agen.aclose()
    assert [o["seq"] for o in first] == [1, 2, 3]
    await log.close()
