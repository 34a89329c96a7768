"""Crash safety: unclean shutdown, torn WAL commit, kill -9 of a writer under load, store outages."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from audit_helpers import Backend, rpc_record_factory

from audit.chain import CheckpointKind
from audit.config import FailurePolicy
from audit.errors import AuditUnavailable
from audit.log import AuditLog
from audit.records import AuditRecord, EventType, decode_record
from audit.stores import open_store
from audit.verify import verify_store
from tests.support.full_disk import fill

HERE = Path(__file__).parent


async def test_unclean_shutdown_is_recovered_not_tampering(backend: Backend, key) -> None:
    settings = backend.settings()
    log = await AuditLog.open(settings, key, start_ticker=False)
    make = rpc_record_factory()
    for i in range(20):
        await log.append(make(i))
    await log.abort()  # crash: no closing checkpoint, 20 unsigned records

    log = await AuditLog.open(settings, key, start_ticker=False)
    assert log.recovery is not None and log.recovery.unclean_shutdown
    assert log.recovery.unsigned_tail == 20
    await log.close()
    with open_store(settings) as store:
        report = verify_store(store, [key.public_key()])
        cps = store.checkpoints("node-a")
        events = [decode_record(r.body)[2].event for r in store.records("node-a", 1, 100)]
    assert report.ok, report.to_json()
    assert report.chains[0].recoveries and "unclean shutdown" in report.chains[0].recoveries[0]
    assert [c.checkpoint.kind for c in cps] == [CheckpointKind.OPEN, CheckpointKind.RECOVERY, CheckpointKind.CLOSE]
    assert events[-1] is EventType.AUDIT_RECOVERED


async def test_torn_last_commit_is_recovered(sqlite_backend: Backend, key, tmp_path: Path) -> None:
    """A crash image whose WAL ends in a torn commit: SQLite drops it, the log reopens sealed."""
    settings = sqlite_backend.settings()
    log = await AuditLog.open(settings, key, start_ticker=False)
    make = rpc_record_factory()
    for i in range(40):
        await log.append(make(i))
    crash = tmp_path / "crash"
    crash.mkdir()
    for suffix in ("", "-wal"):
        shutil.copyfile(str(settings.path) + suffix, str(crash / "audit.db") + suffix)
    await log.close()
    wal = crash / "audit.db-wal"
    size = wal.stat().st_size
    with wal.open("r+b") as fh:  # tear the last commit in the middle of its last frame
        fh.truncate(size - 700)

    crashed = sqlite_backend.settings(path=crash / "audit.db")
    log = await AuditLog.open(crashed, key, start_ticker=False)
    assert log.recovery is not None and log.recovery.unclean_shutdown
    survived = log.recovery.last_seq
    assert 30 <= survived < 40  # only the torn (never acknowledged) commit is gone
    await log.append(make(99))
    await log.close()
    with open_store(crashed) as store:
        report = verify_store(store, [key.public_key()])
    assert report.ok, report.to_json()
    assert report.chains[0].recoveries


def _acked(out: bytes) -> list[int]:
    return [int(x) for x in out.split() if x.isdigit()]


@pytest.mark.parametrize("rounds", [2])
async def test_kill_9_writer_under_load_loses_no_acknowledged_record(backend: Backend, key, tmp_path, rounds) -> None:
    settings = backend.settings()
    key_pem = tmp_path / "key.pem"
    key_pem.write_bytes(key.to_pem())
    where = backend.dsn if backend.kind == "postgresql" else str(settings.path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent), str(HERE)])}
    acked: list[int] = []
    for _ in range(rounds):
        proc = subprocess.Popen(  # noqa: ASYNC220 - the test blocks on purpose while the writer runs
            [sys.executable, str(HERE / "audit_writer_proc.py"), backend.kind, where, str(key_pem)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert proc.stdout is not None
        out = b""
        deadline = time.monotonic() + 30
        while len(_acked(out)) < 300 and time.monotonic() < deadline:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            out += chunk
        proc.send_signal(signal.SIGKILL)
        rest, err = proc.communicate()
        got = _acked(out + rest)
        assert len(got) >= 300, err.decode()[-2000:]
        acked.extend(got)
    log = await AuditLog.open(settings, key, start_ticker=False)
    assert log.recovery is not None and log.recovery.unclean_shutdown
    await log.close()
    with open_store(settings) as store:
        report = verify_store(store, [key.public_key()])
        present = {seq for seq, _, _ in store.iter_hashes("node-a", 1, None)}
    assert report.ok, report.to_json()
    assert set(acked) <= present
    assert len(report.chains[0].recoveries) == rounds


@pytest.mark.parametrize("policy", [FailurePolicy.FAIL_CLOSED, FailurePolicy.LOG_AND_CONTINUE])
async def test_disk_full_then_recovery(sqlite_backend: Backend, key, tiny_fs: Path, policy) -> None:
    settings = sqlite_backend.settings(path=tiny_fs / "audit.db", failure_policy=policy)
    log = await AuditLog.open(settings, key, start_ticker=False)
    make = rpc_record_factory()
    acked = [await log.append(make(i)) for i in range(10)]
    filler = fill(tiny_fs)
    big = "x" * 4000
    failed = 0
    backlogged = 0
    for i in range(2000):
        if policy is FailurePolicy.FAIL_CLOSED:
            try:
                acked.append(await log.append(make(i, detail={"pad": big})))
            except AuditUnavailable as exc:
                assert "unavailable" in str(exc)
                failed += 1
                break
        else:
            seq = await log.append(make(i, detail={"pad": big}))
            if seq is None:
                backlogged += 1
                if backlogged >= 5:
                    break
            else:
                acked.append(seq)
    assert failed or backlogged, "the tmpfs never filled up"
    assert not log.healthy
    assert log.health_detail()["last_error"]
    if policy is FailurePolicy.FAIL_CLOSED:
        with pytest.raises(AuditUnavailable):
            await log.append(make(0))
    filler.unlink()
    seq = await log.append(AuditRecord(event=EventType.DRAIN))
    assert seq is not None and log.healthy
    await log.close()
    with open_store(settings) as store:
        report = verify_store(store, [key.public_key()])
        bounds = store.bounds("node-a")
    assert report.ok, report.to_json()
    assert bounds is not None and set(acked) <= set(range(1, bounds[1] + 1))
    if policy is FailurePolicy.LOG_AND_CONTINUE:
        # the backlogged records were written on recovery, before the new one
        assert bounds[1] == len(acked) + backlogged + 1


async def test_database_connection_lost_then_recovered(backend: Backend, key) -> None:
    if backend.kind != "postgresql":
        pytest.skip("PostgreSQL connection loss")
    settings = backend.settings()
    log = await AuditLog.open(settings, key, start_ticker=False)
    make = rpc_record_factory()
    await log.append(make(1))
    backend.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid()"
    )
    with pytest.raises(AuditUnavailable):
        await log.append(make(2))
    assert not log.healthy
    assert await log.append(make(3)) == 2  # reconnected, writer lock re-taken
    assert log.healthy
    await log.close()
    with open_store(settings) as store:
        assert verify_store(store, [key.public_key()]).ok


@pytest.mark.parametrize("policy", [FailurePolicy.FAIL_CLOSED, FailurePolicy.LOG_AND_CONTINUE])
async def test_write_failure_with_pipelined_batches(sqlite_backend: Backend, key, policy) -> None:
    """A write fails while the next batch is already numbered: no gap, no duplicate, chain intact."""
    import asyncio

    from audit.errors import AuditStoreError

    settings = sqlite_backend.settings(failure_policy=policy, max_batch=50)
    log = await AuditLog.open(settings, key, start_ticker=False)
    store = log._store
    real_write = store.write
    state = {"writes": 0}

    def flaky_write(records, checkpoints):
        state["writes"] += 1
        time.sleep(0.005)  # let the next batch be encoded meanwhile
        if 5 <= state["writes"] < 9:
            raise AuditStoreError("simulated: disk unavailable")
        return real_write(records, checkpoints)

    store.write = flaky_write
    make = rpc_record_factory()
    results = await asyncio.gather(*(log.append(make(i)) for i in range(1000)), return_exceptions=True)
    ok = [r for r in results if isinstance(r, int)]
    failed = [r for r in results if isinstance(r, AuditUnavailable)]
    backlogged = [r for r in results if r is None]
    assert failed or backlogged
    assert len(ok) + len(failed) + len(backlogged) == 1000
    assert len(set(ok)) == len(ok)
    await log.close()
    with open_store(settings) as st:
        report = verify_store(st, [key.public_key()])
        bounds = st.bounds("node-a")
    assert report.ok, report.to_json()
    assert set(ok) <= set(range(1, bounds[1] + 1))
    expected = len(ok) + (len(backlogged) if policy is FailurePolicy.LOG_AND_CONTINUE else 0)
    assert bounds == (1, expected)
