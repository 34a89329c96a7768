"""The SQLite audit database deleted or replaced under a running writer, and a start that finds
an earlier log's traces but no log. Real SQLite store, real rsyslog collector for the alert."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from audit_helpers import Backend, rpc_record_factory
from rsyslog_collector import RSYSLOGD, Rsyslog
from test_audit_anchors import collector, pki, syslog_settings, wait_until  # noqa: F401 (fixtures)

from audit import metrics
from audit.config import FailurePolicy
from audit.errors import AuditUnavailable
from audit.log import AuditIntegrityError, AuditLog
from audit.records import EventType, decode_record
from audit.stores import open_store

needs_rsyslog = pytest.mark.skipif(RSYSLOGD is None, reason="rsyslogd is not installed (scripts/bootstrap installs it)")


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        p = path.with_name(path.name + suffix)
        if p.exists():
            p.unlink()


async def test_a_deleted_database_fails_closed_and_is_not_recreated(sqlite_backend: Backend, key) -> None:
    log = await AuditLog.open(sqlite_backend.settings(), key, start_ticker=False)
    make = rpc_record_factory()
    assert await log.append(make(1)) is not None
    _remove_db(sqlite_backend.path)
    for i in range(3):
        with pytest.raises(AuditUnavailable):
            await log.append(make(2 + i))
    assert not log.healthy
    assert metrics.HEALTHY._value.get() == 0
    assert "deleted under the running server" in (log.last_error or "")
    with pytest.raises(AuditUnavailable):
        await log.checkpoint()
    await log.abort()
    assert not sqlite_backend.path.exists()  # no fresh database was started in its place


async def test_a_replaced_database_is_detected_before_the_next_commit(sqlite_backend: Backend, key, tmp_path) -> None:
    log = await AuditLog.open(sqlite_backend.settings(), key, start_ticker=False)
    make = rpc_record_factory()
    await log.append(make(1))
    copy = tmp_path / "copy.db"
    shutil.copyfile(sqlite_backend.path, copy)
    os.replace(copy, sqlite_backend.path)  # same path, another inode
    with pytest.raises(AuditUnavailable):
        await log.append(make(2))
    assert "replaced under the running server" in (log.last_error or "")
    await log.abort()


async def test_log_and_continue_backlogs_instead_of_writing_to_the_unlinked_file(sqlite_backend: Backend, key) -> None:
    settings = sqlite_backend.settings(failure_policy=FailurePolicy.LOG_AND_CONTINUE)
    log = await AuditLog.open(settings, key, start_ticker=False)
    make = rpc_record_factory()
    await log.append(make(1))
    _remove_db(sqlite_backend.path)
    assert await log.append(make(2)) is None  # accepted into the backlog, not "written"
    assert not log.healthy
    await log.abort()


@needs_rsyslog
async def test_the_deletion_is_sent_down_the_anchor_stream(
    sqlite_backend: Backend,
    key,
    collector: Rsyslog,  # noqa: F811
    pki,  # noqa: F811
) -> None:
    log = await AuditLog.open(sqlite_backend.settings(syslog=syslog_settings(collector, pki)), key, start_ticker=False)
    await log.append(rpc_record_factory()(1))
    _remove_db(sqlite_backend.path)
    with pytest.raises(AuditUnavailable):
        await log.append(rpc_record_factory()(2))

    # The collector is shared by the session's anchor tests: find this test's alert among theirs.
    def ours(line: str) -> bool:
        return " alert " in line and "audit_store_replaced" in line

    await wait_until(lambda: any(ours(x) for x in collector.lines()), timeout_s=120)
    alert = next(x for x in collector.lines() if ours(x))
    assert alert.startswith("<105>1 ")  # facility log audit (13) * 8 + severity alert (1)
    assert '"alert": "audit_store_replaced"' in alert or '"alert":"audit_store_replaced"' in alert
    assert "deleted under the running server" in alert
    await log.abort()


async def test_a_start_with_traces_but_no_log_is_refused_unless_retired(sqlite_backend: Backend, key) -> None:
    settings = sqlite_backend.settings()
    log = await AuditLog.open(settings, key, start_ticker=False)
    await log.append(rpc_record_factory()(1))
    await log.close()
    _remove_db(sqlite_backend.path)  # the writer lock file stays
    with pytest.raises(AuditIntegrityError, match="earlier log's writer lock file"):
        await AuditLog.open(settings, key, start_ticker=False)
    assert not sqlite_backend.path.exists()
    retired = sqlite_backend.settings(previous_log_retired=True)
    log = await AuditLog.open(retired, key, start_ticker=False)
    await log.close()
    with open_store(settings) as store:
        first = [decode_record(r.body)[2] for r in store.records("node-a", 1, 10)]
    event = next(r for r in first if r.event is EventType.AUDIT_STORE_REPLACED)
    assert event.detail == {"retired": True, "traces": "writer lock file"}
    # The next start finds the new log and needs no flag.
    log = await AuditLog.open(settings, key, start_ticker=False)
    await log.close()
