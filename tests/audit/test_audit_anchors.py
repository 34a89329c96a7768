"""Anchors off the host: checkpoints (and records) shipped to a real rsyslog collector, and
``verify`` with those anchors catching rollback, wipe and truncation of the local store."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from audit_helpers import Backend, FakeClock, rpc_record_factory
from local_tsa import LocalTsa, make_tsa_pki
from prometheus_client import REGISTRY
from rsyslog_collector import RSYSLOGD, Rsyslog, free_port

import audit.cli
from audit.anchors import load_anchors, parse_text
from audit.config import FailurePolicy, SyslogSettings, TsaSettings
from audit.errors import AuditUnavailable
from audit.log import AuditIntegrityError, AuditLog
from audit.records import EventType, parse_body
from audit.retention import run_retention
from audit.stores import open_store
from audit.stores.sqlite import SqliteStore
from audit.syslog_shipper import HEADROOM
from audit.timestamping import load_tsa_roots
from audit.verify import verify_store
from tests.support.pki import Pki, make_pki

needs_rsyslog = pytest.mark.skipif(RSYSLOGD is None, reason="rsyslogd is not installed (scripts/bootstrap installs it)")


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="xinserve")
    sub = parser.add_subparsers(dest="command", required=True)
    audit.cli.add_commands(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def collector(tmp_path: Path, pki: Pki) -> Iterator[Rsyslog]:
    rs = Rsyslog(tmp_path / "rsyslog", pki=pki)
    rs.start()
    yield rs
    rs.stop()


def syslog_settings(rs: Rsyslog, pki: Pki, **kw: object) -> SyslogSettings:
    options: dict[str, object] = {"retry_interval_s": 0.1, "flush_timeout_s": 120, **kw}
    return SyslogSettings(host="127.0.0.1", port=rs.port, tls=True, ca_file=pki.ca_cert, **options)  # type: ignore[arg-type]


async def wait_until(predicate, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


def record_seqs(lines: list[str]) -> list[int]:
    return [seq for line in lines for (_, seq) in parse_text(line).records]


def pem_of(key, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    pem = tmp_path / "server.pub.pem"
    pem.write_bytes(key.public_key().to_pem())
    return pem


@needs_rsyslog
async def test_records_and_checkpoints_arrive_intact_and_in_order_over_tls(
    sqlite_backend: Backend, key, collector: Rsyslog, pki: Pki
) -> None:
    settings = sqlite_backend.settings(syslog=syslog_settings(collector, pki, ship_records=True))
    log = await AuditLog.open(settings, key, start_ticker=False)
    make = rpc_record_factory()
    seqs = await asyncio.gather(*(log.append(make(i)) for i in range(40)))
    await log.checkpoint()
    await log.close()
    last = max(s for s in seqs if s is not None)
    lines = collector.wait_for(lambda ls: last in record_seqs(ls) and sum(" checkpoint " in x for x in ls) >= 3)
    # RFC 5424 header as rsyslog received it: <PRI>1 TIMESTAMP HOST APP PROCID MSGID [SD] MSG
    assert all(line.startswith(("<109>1 ", "<110>1 ")) for line in lines)
    assert record_seqs(lines) == list(range(1, last + 1))
    anchors = load_anchors([collector.stream])
    kinds = [a.checkpoint.kind.value for a in anchors.checkpoints]
    assert kinds[0] == "open" and kinds[-1] == "close" and "periodic" in kinds
    with SqliteStore(sqlite_backend.path, readonly=True) as store:
        stored = {seq: h for seq, _, h in store.iter_hashes("node-a", 1, None)}
        assert {seq: h for (_, seq), h in anchors.records.items()} == stored
        held = [p for _, p, _ in store.raw_checkpoints("node-a")]
        assert [a.payload for a in anchors.checkpoints] == held
        assert verify_store(store, [key.public_key()], anchors=anchors).ok


@needs_rsyslog
async def test_rollback_wipe_and_truncation_are_caught_with_the_stream(
    sqlite_backend: Backend, key, collector: Rsyslog, pki: Pki, tmp_path: Path, capsys
) -> None:
    settings = sqlite_backend.settings(syslog=syslog_settings(collector, pki))
    make = rpc_record_factory()
    log = await AuditLog.open(settings, key, start_ticker=False)
    for i in range(5):
        await log.append(make(i))
    await log.close()
    old = tmp_path / "old"
    old.mkdir()
    for f in sqlite_backend.path.parent.glob("audit.db*"):
        shutil.copy2(f, old / f.name)
    log = await AuditLog.open(settings, key, start_ticker=False)
    for i in range(5):
        await log.append(make(i))
    await log.close()
    collector.wait_for(lambda ls: sum(" checkpoint " in x for x in ls) >= 4)
    pem = pem_of(key, tmp_path)
    base = ["audit", "verify", "--store", str(sqlite_backend.path), "--public-key", str(pem), "--offline"]
    stream = ["--anchor", str(collector.stream)]
    assert run_cli(base + stream) == 0

    # Rollback: the older copy verifies on its own (a clean close), not against the stream.
    for f in sqlite_backend.path.parent.glob("audit.db*"):
        f.unlink()
    for f in old.iterdir():
        shutil.copy2(f, sqlite_backend.path.parent / f.name)
    assert run_cli(base) == 0
    capsys.readouterr()
    assert run_cli(base + stream) == 1
    assert "anchor_missing" in capsys.readouterr().out

    # Truncation of whole runs: the same, seen from the checkpoints that were cut off.
    with SqliteStore(sqlite_backend.path, readonly=True) as store:
        report = verify_store(store, [key.public_key()], anchors=load_anchors([collector.stream]))
    assert {p.kind for c in report.chains for p in c.problems} == {"anchor_missing"}

    # Wipe: the database deleted; with the stream that is a failure (exit 1), not "no records".
    for f in sqlite_backend.path.parent.glob("audit.db*"):
        f.unlink()
    assert run_cli(base + stream) == 1
    out = capsys.readouterr().out
    assert "store_missing" in out and "anchor_missing" in out

    # Wipe and restart: a fresh chain that verifies alone, but not against the stream.
    log = await AuditLog.open(sqlite_backend.settings(), key, start_ticker=False)
    await log.append(make(0))
    await log.close()
    assert run_cli(base) == 0
    capsys.readouterr()
    assert run_cli(base + stream) == 1
    assert "anchor_missing" in capsys.readouterr().out


@needs_rsyslog
async def test_collector_down_fail_closed_refuses_then_recovers(
    sqlite_backend: Backend, key, pki: Pki, tmp_path: Path
) -> None:
    rs = Rsyslog(tmp_path / "late-rsyslog", pki=pki, port=free_port())  # not started: the collector is down
    settings = sqlite_backend.settings(syslog=syslog_settings(rs, pki, ship_records=True, buffer_limit=8))
    log = await AuditLog.open(settings, key, start_ticker=False)
    make = rpc_record_factory()
    accepted = 0
    with pytest.raises(AuditUnavailable):
        for i in range(100):
            await log.append(make(i))
            accepted += 1
    assert 0 < accepted < 100 and not log.healthy
    assert log.shipper is not None and log.shipper.lost == 0
    rs.start()
    try:
        await wait_until(lambda: log.healthy and log.shipper is not None and log.shipper.buffered == 0)
        await log.append(make(999))
        await log.close()
        last = log.last_seq
        lines = rs.wait_for(lambda ls: last in record_seqs(ls))
    finally:
        rs.stop()
    assert record_seqs(lines) == list(range(1, last + 1))  # nothing was lost on the way
    with SqliteStore(sqlite_backend.path, readonly=True) as store:
        events = [parse_body(r.body) for r in store.records("node-a", 1, last)]
    shipping = [e for e in events if e["event"] == EventType.AUDIT_ANCHOR_SHIPPING]
    assert [e["detail"]["state"] for e in shipping] == ["down", "up"]
    assert shipping[0]["outcome"] == "UNAVAILABLE" and shipping[1]["outcome"] == "OK"


@needs_rsyslog
async def test_collector_down_log_and_continue_counts_and_records_the_loss(
    sqlite_backend: Backend, key, pki: Pki, tmp_path: Path
) -> None:
    rs = Rsyslog(tmp_path / "late-rsyslog", pki=pki, port=free_port())
    settings = sqlite_backend.settings(
        failure_policy=FailurePolicy.LOG_AND_CONTINUE,
        syslog=syslog_settings(rs, pki, ship_records=True, buffer_limit=4),
    )
    lost_before = REGISTRY.get_sample_value("xinserve_audit_anchors_lost_total") or 0.0
    log = await AuditLog.open(settings, key, start_ticker=False)
    make = rpc_record_factory()
    for i in range(100):
        assert await log.append(make(i)) is not None  # calls go on (degraded)
    assert log.healthy
    assert log.shipper is not None and log.shipper.buffered == 4 + HEADROOM  # bounded
    lost = log.shipper.lost
    assert lost >= 100 - (4 + HEADROOM)  # 100 records (and the open checkpoint, the "down" event) offered
    assert REGISTRY.get_sample_value("xinserve_audit_anchors_lost_total") == lost_before + lost
    rs.start()
    try:
        await wait_until(lambda: log.shipper is not None and log.shipper.buffered == 0 and log.shipper.connected)
        await log.close()
        rs.wait_for(lambda ls: any("DATA_LOSS" in x for x in ls))
    finally:
        rs.stop()
    with SqliteStore(sqlite_backend.path, readonly=True) as store:
        events = [parse_body(r.body) for r in store.records("node-a", 1, log.last_seq)]
    losses = [e for e in events if e["event"] == EventType.AUDIT_ANCHOR_SHIPPING and e["detail"]["state"] == "lost"]
    assert len(losses) == 1 and losses[0]["detail"]["count"] >= lost and losses[0]["outcome"] == "DATA_LOSS"


def test_a_binary_anchor_file_is_a_usage_error(tmp_path: Path, key, capsys) -> None:
    bad = tmp_path / "anchor.bin"
    bad.write_bytes(bytes(range(256)))
    db = tmp_path / "audit.db"
    with SqliteStore(db) as store:
        store.create_schema()
    pem = pem_of(key, tmp_path)
    assert run_cli(["audit", "verify", "--store", str(db), "--public-key", str(pem), "--anchor", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not text" in err


@pytest.fixture
def tsa(tmp_path: Path) -> Iterator[LocalTsa]:
    t = LocalTsa(tmp_path / "tsa")
    yield t
    t.close()


@needs_rsyslog
async def test_checkpoints_carry_rfc3161_timestamps_that_verify(
    sqlite_backend: Backend, key, collector: Rsyslog, pki: Pki, tsa: LocalTsa, tmp_path: Path
) -> None:
    settings = sqlite_backend.settings(syslog=syslog_settings(collector, pki), tsa=TsaSettings(url=tsa.url))
    log = await AuditLog.open(settings, key, start_ticker=False)
    await log.append(rpc_record_factory()(0))
    await log.checkpoint()
    await log.close()
    collector.wait_for(lambda ls: sum('"tst"' in x for x in ls) >= 3)
    anchors = load_anchors([collector.stream])
    assert len(anchors.timestamps) == len(anchors.checkpoints) == 3 and tsa.requests == 3
    roots = load_tsa_roots(tsa.ca.read_bytes())
    with SqliteStore(sqlite_backend.path, readonly=True) as store:
        assert verify_store(store, [key.public_key()], anchors=anchors, tsa_roots=roots).ok
        foreign = load_tsa_roots(make_tsa_pki(tmp_path / "other-tsa", "some other TSA")[0].read_bytes())
        report = verify_store(store, [key.public_key()], anchors=anchors, tsa_roots=foreign)
    assert {p.kind for p in report.chains[0].problems} == {"anchor_timestamp_invalid"}


@needs_rsyslog
async def test_a_purge_under_a_forged_clock_is_caught_by_timestamps_and_archives_are_checked(
    sqlite_backend: Backend, key, collector: Rsyslog, pki: Pki, tsa: LocalTsa, tmp_path: Path, capsys
) -> None:
    """With the server key and a clock set 200 days ahead, recent records are purged under a
    cutoff that looks legal; the signed log verifies, the TSA's times do not agree."""
    clock = FakeClock(int(time.time() * 1000))
    settings = sqlite_backend.settings(syslog=syslog_settings(collector, pki), tsa=TsaSettings(url=tsa.url))
    log = await AuditLog.open(settings, key, clock=clock, start_ticker=False)
    make = rpc_record_factory(clock)
    for i in range(6):
        await log.append(make(i))
    await log.close()
    clock.advance(days=200)
    log = await AuditLog.open(settings, key, clock=clock, start_ticker=False)
    result = await run_retention(log)
    assert result.purged == 6
    await log.close()
    collector.wait_for(lambda ls: sum('"tst"' in x for x in ls) >= 5)
    pem = pem_of(key, tmp_path)
    base = ["audit", "verify", "--store", str(sqlite_backend.path), "--public-key", str(pem), "--offline"]
    stream = ["--anchor", str(collector.stream)]
    archive = ["--archive-dir", str(settings.effective_archive_dir())]
    assert run_cli(base + stream + archive) == 0  # the signatures alone cannot tell
    capsys.readouterr()
    assert run_cli(base + stream + ["--tsa-cert", str(tsa.ca)]) == 1
    out = capsys.readouterr().out
    assert "purge_unproven" in out and "checkpoint_time_forged" in out
    assert result.archive is not None
    result.archive.unlink()
    assert run_cli(base + archive) == 1
    assert "purge_archive_missing" in capsys.readouterr().out


@pytest.mark.parametrize(
    "tamper",
    [
        "DROP TABLE audit_checkpoints",
        "DROP TABLE audit_records",
        "ALTER TABLE audit_records RENAME TO x; "
        "CREATE TABLE audit_records (chain TEXT, seq TEXT, time_ms TEXT, event TEXT, principal TEXT, method TEXT, "
        "outcome TEXT, body TEXT, hash TEXT); INSERT INTO audit_records SELECT * FROM x; DROP TABLE x",
    ],
)
async def test_dropped_or_rebuilt_tables_are_tampering(
    sqlite_backend: Backend, key, tmp_path: Path, capsys, tamper: str
) -> None:
    log = await AuditLog.open(sqlite_backend.settings(), key, start_ticker=False)
    for i in range(3):
        await log.append(rpc_record_factory()(i))
    await log.close()
    db = sqlite3.connect(sqlite_backend.path, isolation_level=None)
    db.executescript(tamper)
    db.close()
    pem = pem_of(key, tmp_path)
    assert run_cli(["audit", "verify", "--store", str(sqlite_backend.path), "--public-key", str(pem)]) == 1
    out = capsys.readouterr().out
    assert "schema_altered" in out and ("dropped" in out or "rebuilt" in out)
    with pytest.raises(AuditIntegrityError, match="tables"):
        await AuditLog.open(sqlite_backend.settings(), key, start_ticker=False)


@pytest.mark.parametrize(
    "tamper",
    ["DROP TABLE audit_checkpoints", "ALTER TABLE audit_records RENAME COLUMN outcome TO result"],
)
async def test_dropped_or_rebuilt_tables_on_both_stores(backend: Backend, key, tamper: str) -> None:
    log = await AuditLog.open(backend.settings(), key, start_ticker=False)
    await log.append(rpc_record_factory()(0))
    await log.close()
    backend.sql(tamper)
    with open_store(backend.settings(), readonly=True) as store:
        report = verify_store(store, [key.public_key()])
    assert not report.ok and {p.kind for c in report.chains for p in c.problems} == {"schema_altered"}
    with pytest.raises(AuditIntegrityError, match="tables"):
        await AuditLog.open(backend.settings(), key, start_ticker=False)


@needs_rsyslog
async def test_a_chain_rebuilt_with_the_key_is_caught_by_the_shipped_records(
    sqlite_backend: Backend, key, collector: Rsyslog, pki: Pki
) -> None:
    """Host root with the checkpoint key deletes the log and writes a forged one of the same
    length under the same chain id; the forged run is shipped too, but the first one was."""
    settings = sqlite_backend.settings(syslog=syslog_settings(collector, pki, ship_records=True))
    log = await AuditLog.open(settings, key, start_ticker=False)
    for i in range(5):
        await log.append(rpc_record_factory()(i))
    await log.close()
    for f in sqlite_backend.path.parent.glob("audit.db*"):
        f.unlink()
    log = await AuditLog.open(settings, key, start_ticker=False)
    for i in range(5):
        await log.append(rpc_record_factory()(i, principal="someone-else"))
    await log.close()
    collector.wait_for(lambda ls: sum(" checkpoint " in x for x in ls) >= 4)
    anchors = load_anchors([collector.stream])
    assert anchors.conflicts  # the same positions were shipped with two different hashes
    with SqliteStore(sqlite_backend.path, readonly=True) as store:
        assert verify_store(store, [key.public_key()]).ok  # on its own the forgery verifies
        report = verify_store(store, [key.public_key()], anchors=anchors)
    kinds = {p.kind for p in report.chains[0].problems}
    assert {"anchor_record_altered", "anchor_missing"} <= kinds


@needs_rsyslog
async def test_a_collector_that_requires_client_certificates(
    sqlite_backend: Backend, key, pki: Pki, tmp_path: Path
) -> None:
    """Mutual TLS: without a client certificate the collector refuses the session (recorded as
    the collector being down); with one issued by the collector's CA the anchors arrive."""
    rs = Rsyslog(tmp_path / "mtls-rsyslog", pki=pki, require_client_cert=True)
    rs.start()
    try:
        no_cert = sqlite_backend.settings(node_id="no-cert", syslog=syslog_settings(rs, pki, flush_timeout_s=0))
        log = await AuditLog.open(no_cert, key, start_ticker=False)
        await log.append(rpc_record_factory()(0))
        await wait_until(lambda: log.shipper is not None and log.shipper.last_error is not None)
        await log.close()
        settings = sqlite_backend.settings(
            syslog=syslog_settings(rs, pki, client_cert_file=pki.client_cert, client_key_file=pki.client_key)
        )
        log = await AuditLog.open(settings, key, start_ticker=False)
        await log.append(rpc_record_factory()(0))
        await log.close()
        lines = rs.wait_for(lambda ls: any('kind="close"' in x and 'chain="node-a"' in x for x in ls))
    finally:
        rs.stop()
    assert not any('chain="no-cert"' in x for x in lines)
    assert [a.checkpoint.kind.value for a in parse_text("\n".join(lines)).checkpoints] == ["open", "close"]


@needs_rsyslog
async def test_a_collector_restart_loses_no_anchor(sqlite_backend: Backend, key, pki: Pki, tmp_path: Path) -> None:
    """The collector is restarted between two bursts: the shipper notices the closed session,
    reconnects and sends again what may not have arrived; every record reaches the stream
    (some possibly twice)."""
    rs = Rsyslog(tmp_path / "restarting-rsyslog", pki=pki)
    rs.start()
    settings = sqlite_backend.settings(syslog=syslog_settings(rs, pki, ship_records=True))
    log = await AuditLog.open(settings, key, start_ticker=False)
    make = rpc_record_factory()
    try:
        for i in range(20):
            await log.append(make(i))
        await wait_until(lambda: 20 in record_seqs(rs.lines()))  # the shipper runs on this loop
        rs.stop()
        await wait_until(lambda: log.shipper is not None and not log.shipper.connected)
        for i in range(20, 40):
            await log.append(make(i))
        rs.start()
        await log.close()
        last = log.last_seq
        lines = rs.wait_for(lambda ls: last in record_seqs(ls))
    finally:
        rs.stop()
    assert set(record_seqs(lines)) == set(range(1, last + 1))
    with SqliteStore(sqlite_backend.path, readonly=True) as store:
        assert verify_store(store, [key.public_key()], anchors=load_anchors([rs.stream])).ok


def test_a_store_without_tables_is_empty_unless_anchors_say_otherwise(tmp_path: Path, key) -> None:
    db = tmp_path / "audit.db"
    db.touch()
    with SqliteStore(db, readonly=True) as store:
        assert verify_store(store, [key.public_key()]).chains == []
