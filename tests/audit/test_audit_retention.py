"""Retention with an injected clock: archive then purge at 190 days, nothing at 179, purges verify."""

from __future__ import annotations

import asyncio

import pytest
from audit_helpers import Backend, FakeClock, rpc_record_factory

from audit.archive import read_archive, verify_archive
from audit.chain import CheckpointKind
from audit.errors import AuditConfigError
from audit.log import AuditLog
from audit.records import EventType, decode_record
from audit.retention import check_disk, run_retention
from audit.stores import open_store
from audit.verify import verify_store


async def _session(backend: Backend, key, clock: FakeClock, n: int, start: int = 0) -> None:
    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    make = rpc_record_factory(clock)
    for i in range(n):
        await log.append(make(start + i))
        clock.advance(seconds=1)
    await log.close()


async def _history(backend: Backend, key, clock: FakeClock, age_days: int) -> None:
    """10 records ``age_days`` old, 5 records 10 days old; the clock ends at 'now'."""
    await _session(backend, key, clock, 10)
    clock.advance(days=age_days - 10)
    await _session(backend, key, clock, 5, start=10)
    clock.advance(days=10)


async def test_190_days_archives_then_purges_and_verifies(backend: Backend, key, clock) -> None:
    await _history(backend, key, clock, 190)
    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    result = await run_retention(log)
    await log.close()
    assert result.purged == 10 and (result.purged_from, result.purged_through) == (1, 10)
    assert result.archive is not None and result.archive.exists()

    _header, rows, cps = read_archive(result.archive)
    assert [r[0] for r in rows] == list(range(1, 11))
    assert cps and any(c.checkpoint.tree_size >= 10 for c in cps)
    assert verify_archive(result.archive, [key.public_key()]) == []

    with open_store(backend.settings()) as store:
        assert store.bounds("node-a") == (11, 16)  # 5 young records + the retention_run record
        report = verify_store(store, [key.public_key()], now_ms=clock())
        kinds = [c.checkpoint.kind for c in store.checkpoints("node-a")]
        events = [decode_record(r.body)[2].event for r in store.records("node-a", 11, 100)]
    assert report.ok, report.to_json()
    assert report.chains[0].purges and "records up to 10 purged" in report.chains[0].purges[0]
    assert CheckpointKind.PURGE in kinds
    assert EventType.RETENTION_RUN in events  # the retention run is itself audited

    # An early deletion after a legitimate purge is still caught.
    backend.sql("DELETE FROM audit_records WHERE seq = 11")
    with open_store(backend.settings()) as store:
        report = verify_store(store, [key.public_key()], now_ms=clock())
    assert report.chains[0].first_broken == 11


async def test_179_days_purges_nothing(backend: Backend, key, clock) -> None:
    await _history(backend, key, clock, 179)
    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    result = await run_retention(log)
    await log.close()
    assert result.purged == 0 and result.archive is None
    with open_store(backend.settings()) as store:
        assert store.bounds("node-a")[0] == 1  # type: ignore[index]
        assert verify_store(store, [key.public_key()], now_ms=clock()).ok


async def test_retention_below_minimum_refused(sqlite_backend: Backend, key, clock) -> None:
    log = await AuditLog.open(sqlite_backend.settings(), key, clock=clock, start_ticker=False)
    try:
        with pytest.raises(AuditConfigError):
            await run_retention(log, retention_days=179)
    finally:
        await log.close()


async def test_early_purge_fails_verification_even_if_signed(sqlite_backend: Backend, key, clock) -> None:
    """A purge checkpoint whose cutoff is younger than 180 days never verifies."""
    await _session(sqlite_backend, key, clock, 10)
    clock.advance(days=30)
    log = await AuditLog.open(sqlite_backend.settings(), key, clock=clock, start_ticker=False)

    def rogue(store, lg):
        anchor = store.hash_at("node-a", 5)
        cp = lg.make_checkpoint(
            CheckpointKind.PURGE,
            {
                "purged_from": 1,
                "purged_through": 5,
                "anchor_hash": anchor.hex(),
                "cutoff_ms": clock() - 20 * 86_400_000,
                "retention_days": 20,
                "archive": "none",
                "archive_sm3": "00",
                "records": 5,
            },
        )
        store.purge("node-a", 5, cp)

    await log.run_in_writer(rogue)
    await log.close()
    with open_store(sqlite_backend.settings()) as store:
        report = verify_store(store, [key.public_key()], now_ms=clock())
    assert not report.ok
    assert {p.kind for p in report.chains[0].problems} >= {"purge_too_early"}


async def test_encrypted_archive(sqlite_backend: Backend, key, clock) -> None:
    await _history(sqlite_backend, key, clock, 200)
    log = await AuditLog.open(sqlite_backend.settings(), key, clock=clock, start_ticker=False)
    sm4_key = bytes(range(16))
    result = await run_retention(log, archive_key=sm4_key)
    await log.close()
    assert result.archive is not None and result.archive.name.endswith(".jsonl.gz.sm4")
    assert b"node-a" not in result.archive.read_bytes()
    assert verify_archive(result.archive, [key.public_key()], sm4_key) == []
    with pytest.raises(AuditConfigError):
        read_archive(result.archive)
    with pytest.raises(Exception, match="authentication"):
        read_archive(result.archive, bytes(16))


def test_disk_watermark(tmp_path) -> None:
    assert check_disk(tmp_path, warn_ratio=1.0).warning is None
    status = check_disk(tmp_path, warn_ratio=0.0001)
    assert status.warning is not None and "full" in status.warning


async def test_retention_runs_automatically(sqlite_backend: Backend, key, clock) -> None:
    await _history(sqlite_backend, key, clock, 200)
    settings = sqlite_backend.settings(checkpoint_interval_s=1, retention_interval_s=3600)
    log = await AuditLog.open(settings, key, clock=clock)
    for _ in range(50):
        await asyncio.sleep(0.1)
        if log.last_seq >= 16:
            break
    await log.close()
    with open_store(settings) as store:
        assert store.bounds("node-a")[0] == 11  # type: ignore[index]
        assert verify_store(store, [key.public_key()], now_ms=clock()).ok


def test_postgresql_needs_an_archive_dir() -> None:
    from pydantic import SecretStr

    from audit.config import AuditSettings, StoreKind

    with pytest.raises(ValueError, match="archive_dir"):
        AuditSettings(store=StoreKind.POSTGRESQL, dsn=SecretStr("postgresql://x@y/z"))
