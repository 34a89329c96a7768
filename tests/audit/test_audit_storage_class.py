"""SQLite keeps whatever storage class an UPDATE writes (the byte columns have BLOB affinity): a body,
hash, checkpoint payload or signature rewritten as TEXT, INTEGER or REAL must reach every reader as
bytes (TEXT as its UTF-8 bytes, numbers as their text), so that verification decides — never a crash.

SQLite only: PostgreSQL's ``bytea`` columns cannot hold anything but bytes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from audit_helpers import Backend, FakeClock, rpc_record_factory

import audit.cli
from audit.chain import SignedCheckpoint
from audit.log import AuditIntegrityError, AuditLog
from audit.stores import QueryFilter, open_store
from audit.verify import VerifyReport, verify_store

CHAIN = "node-a"


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="xinserve")
    sub = parser.add_subparsers(dest="command", required=True)
    audit.cli.add_commands(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


async def build(backend: Backend, key, clock: FakeClock, n: int = 12, *, close: bool = True) -> None:
    """``n`` records; checkpoints: open (0), periodic (6), close (n) unless ``close`` is false."""
    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    make = rpc_record_factory(clock)
    for i in range(n):
        await log.append(make(i))
        clock.advance(seconds=1)
        if i == 5:
            await log.checkpoint()
    if close:
        await log.close()
    else:
        await log.abort()  # crash: the records after checkpoint 2 stay unsigned


def verify(backend: Backend, key, clock: FakeClock, **kw) -> VerifyReport:
    with open_store(backend.settings()) as store:
        return verify_store(store, [key.public_key()], now_ms=clock(), **kw)


def typeof(backend: Backend, table: str, column: str, where: str) -> str:
    (row,) = backend.sql(f"SELECT typeof({column}) FROM {table} WHERE {where}")
    return str(row[0])


def snapshot(backend: Backend, key) -> dict:
    """Everything every read path returns, for comparison after a byte-preserving rewrite."""
    with open_store(backend.settings()) as store:
        return {
            "head": store.head(CHAIN),
            "hash_at": [store.hash_at(CHAIN, s) for s in range(1, 13)],
            "iter_hashes": list(store.iter_hashes(CHAIN, 1, None)),
            "records": list(store.records(CHAIN, 1, 12)),
            "query": list(store.query(QueryFilter())),
            "query_desc": list(store.query(QueryFilter(chain=CHAIN, descending=True, limit=3))),
            "raw_checkpoints": store.raw_checkpoints(CHAIN),
            "checkpoints": store.checkpoints(CHAIN),
            "last_checkpoint": store.last_checkpoint(CHAIN),
        }


def assert_all_bytes(snap: dict) -> None:
    assert isinstance(snap["head"][1], bytes)
    assert all(isinstance(h, bytes) for h in snap["hash_at"])
    assert all(isinstance(b, bytes) and isinstance(h, bytes) for _, b, h in snap["iter_hashes"])
    for key in ("records", "query", "query_desc"):
        assert all(isinstance(r.body, bytes) and isinstance(r.hash, bytes) for r in snap[key])
    assert all(isinstance(p, bytes) and isinstance(s, bytes) for _, p, s in snap["raw_checkpoints"])
    assert isinstance(snap["last_checkpoint"], SignedCheckpoint)


async def test_text_copies_change_nothing(sqlite_backend: Backend, key, clock, tmp_path: Path, capsys) -> None:
    """``cast(x as text)`` changes no byte: every reader gets the same bytes and the log verifies."""
    backend = sqlite_backend
    await build(backend, key, clock)
    before = snapshot(backend, key)
    backend.sql("UPDATE audit_records SET body = CAST(body AS TEXT), hash = CAST(hash AS TEXT)")
    backend.sql("UPDATE audit_checkpoints SET payload = CAST(payload AS TEXT), signature = CAST(signature AS TEXT)")
    assert typeof(backend, "audit_records", "body", "seq = 12") == "text"
    assert typeof(backend, "audit_records", "hash", "seq = 12") == "text"
    assert typeof(backend, "audit_checkpoints", "payload", "n = 3") == "text"
    assert typeof(backend, "audit_checkpoints", "signature", "n = 3") == "text"

    after = snapshot(backend, key)
    assert_all_bytes(after)
    assert after == before
    report = verify(backend, key, clock)
    assert report.ok, report.to_json()
    assert report.records_checked == 12

    # The log reopens on it (last checkpoint and the record it signs are read back as bytes).
    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    assert log.recovery is not None and not log.recovery.unclean_shutdown
    assert len(await log.query(QueryFilter())) == 12
    assert len([x async for x in log.stream(QueryFilter())]) == 12
    assert (await log.verify(now_ms=clock())).ok
    await log.close()

    pem = tmp_path / "pub.pem"
    pem.write_bytes(key.public_key().to_pem())
    store = str(backend.path)
    assert run_cli(["audit", "verify", "--store", store, "--public-key", str(pem), "--offline"]) == 0
    assert run_cli(["audit", "export", "--store", store]) == 0
    assert run_cli(["audit", "tail", "--store", store, "-n", "3"]) == 0
    assert run_cli(["audit", "export", "--store", store, "--checkpoints"]) == 0
    assert "unexpected error" not in capsys.readouterr().err


async def test_edited_text_body_is_record_altered(sqlite_backend: Backend, key, clock, tmp_path: Path, capsys) -> None:
    """The tester's repro: SQLite's replace() edits a body and stores it as TEXT."""
    backend = sqlite_backend
    await build(backend, key, clock)
    backend.sql(
        'UPDATE audit_records SET body = replace(body, \'"principal":"user-1"\', \'"principal":"mallory"\')'
        " WHERE seq = 5"
    )
    assert typeof(backend, "audit_records", "body", "seq = 5") == "text"
    snap = snapshot(backend, key)
    assert_all_bytes(snap)
    assert b'"principal":"mallory"' in snap["records"][4].body

    report = verify(backend, key, clock)
    assert not report.ok
    assert report.chains[0].first_broken == 5
    assert {p.kind for p in report.chains[0].problems} == {"record_altered"}

    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    rows = await log.query(QueryFilter(principal="user-1"))
    assert 5 in [r.seq for r in rows] and all(isinstance(r.body, bytes) for r in rows)
    exported = [x async for x in log.stream(QueryFilter())]
    assert [x["principal"] for x in exported if x["seq"] == 5] == ["mallory"]
    server_report = await log.verify(now_ms=clock())
    assert not server_report.ok and server_report.chains[0].first_broken == 5
    await log.close()

    pem = tmp_path / "pub.pem"
    pem.write_bytes(key.public_key().to_pem())
    store = str(backend.path)
    capsys.readouterr()
    assert run_cli(["audit", "verify", "--store", store, "--public-key", str(pem), "--offline"]) == 1
    out = capsys.readouterr().out
    assert "first broken record: 5" in out and "record_altered" in out
    assert run_cli(["audit", "export", "--store", store]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["seq"] for x in lines] == list(range(1, 13))
    assert run_cli(["audit", "tail", "--store", store, "-n", "20"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 12 and "unexpected error" not in captured.err


@pytest.mark.parametrize("value", ["12345", "1.5", "'plain text'"])
async def test_numbers_and_text_in_byte_columns_are_verified_not_crashed(
    sqlite_backend: Backend, key, clock, value: str
) -> None:
    """INTEGER, REAL and foreign TEXT in a body or hash read as their text; verify names the record."""
    backend = sqlite_backend
    await build(backend, key, clock)
    backend.sql(f"UPDATE audit_records SET body = {value} WHERE seq = 3")
    backend.sql(f"UPDATE audit_records SET hash = {value} WHERE seq = 8")
    expected_type = {"12345": "integer", "1.5": "real"}.get(value, "text")
    assert typeof(backend, "audit_records", "body", "seq = 3") == expected_type
    text = value.strip("'").encode()
    with open_store(backend.settings()) as store:
        (rec3,) = store.records(CHAIN, 3, 3)
        assert rec3.body == text
        assert store.hash_at(CHAIN, 8) == text
        assert dict((s, b) for s, b, _ in store.iter_hashes(CHAIN, 1, None))[3] == text
        assert [r.body for r in store.query(QueryFilter(chain=CHAIN)) if r.seq == 3] == [text]
    report = verify(backend, key, clock)
    assert report.chains[0].first_broken == 3
    assert "record_altered" in {p.kind for p in report.chains[0].problems}
    report = verify(backend, key, clock, start=8)
    assert report.chains[0].first_broken == 8
    assert "record_altered" in {p.kind for p in report.chains[0].problems}


@pytest.mark.parametrize("value", ["7", "2.5", "'not a payload'"])
async def test_non_blob_checkpoint_is_a_checkpoint_problem(sqlite_backend: Backend, key, clock, value: str) -> None:
    backend = sqlite_backend
    await build(backend, key, clock)
    backend.sql(f"UPDATE audit_checkpoints SET payload = {value} WHERE n = 2")
    backend.sql(f"UPDATE audit_checkpoints SET signature = {value} WHERE n = 3")
    with open_store(backend.settings()) as store:
        raw = store.raw_checkpoints(CHAIN)
    assert raw[1][1] == value.strip("'").encode() and raw[2][2] == value.strip("'").encode()
    report = verify(backend, key, clock)
    kinds = {p.kind for p in report.chains[0].problems}
    assert "checkpoint_malformed" in kinds and "checkpoint_bad_signature" in kinds

    # The last checkpoint's signature is what open checks: fail closed, never a TypeError.
    with pytest.raises(AuditIntegrityError):
        await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)


async def test_non_blob_last_checkpoint_payload_fails_closed_at_open(sqlite_backend: Backend, key, clock) -> None:
    backend = sqlite_backend
    await build(backend, key, clock)
    backend.sql("UPDATE audit_checkpoints SET payload = 42 WHERE n = 3")
    with pytest.raises(AuditIntegrityError):
        await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)


async def test_text_record_in_the_unsigned_tail_at_open(sqlite_backend: Backend, key, clock) -> None:
    """Recovery re-chains the unsigned tail: a TEXT copy still chains, an edited one fails closed."""
    backend = sqlite_backend
    await build(backend, key, clock, close=False)  # records 7..12 unsigned
    backend.sql("UPDATE audit_records SET body = CAST(body AS TEXT), hash = CAST(hash AS TEXT) WHERE seq >= 9")
    log = await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)
    assert log.recovery is not None and log.recovery.unclean_shutdown and log.recovery.unsigned_tail == 6
    await log.abort()  # crash again: the recovery record (14) is unsigned

    backend.sql(
        "UPDATE audit_records SET body = replace(body, '\"unsigned_tail\":6', '\"unsigned_tail\":0') WHERE seq = 13"
    )
    assert typeof(backend, "audit_records", "body", "seq = 13") == "text"
    with pytest.raises(AuditIntegrityError, match="record 13"):
        await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)


async def test_text_record_without_any_checkpoint_at_open(sqlite_backend: Backend, key, clock) -> None:
    """Records but no checkpoint (crash in the first interval): re-chained from genesis."""
    backend = sqlite_backend
    await build(backend, key, clock, n=4, close=False)
    backend.sql("DELETE FROM audit_checkpoints")
    backend.sql("UPDATE audit_records SET body = replace(body, '\"OK\"', '\"ABORTED\"') WHERE seq = 2")
    with pytest.raises(AuditIntegrityError, match="record 2"):
        await AuditLog.open(backend.settings(), key, clock=clock, start_ticker=False)


@pytest.mark.parametrize(
    "assignment",
    [
        "time_ms = 'yesterday'",
        "time_ms = 1.5",
        "event = x'ff00fe'",
        "principal = x'c3'",
        "method = 42",
        "outcome = x'80'",
        "chain = chain || x'ff'",
    ],
)
async def test_other_columns_with_other_types_are_read_not_crashed(
    sqlite_backend: Backend, key, clock, tmp_path: Path, capsys, assignment: str
) -> None:
    """Indexed columns rewritten as another storage class (or as bytes that are not UTF-8):
    export and tail print the record, verify reports it altered (exit 1), never exit 3."""
    await build(sqlite_backend, key, clock)
    sqlite_backend.sql(f"UPDATE audit_records SET {assignment} WHERE seq = 5")
    pem = tmp_path / "server.pub.pem"
    pem.write_bytes(key.public_key().to_pem())
    store = ["--store", str(sqlite_backend.path)]
    assert run_cli(["audit", "export", *store]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 12 and all(json.loads(line) for line in lines)
    assert run_cli(["audit", "tail", "-n", "20", *store]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 12
    assert run_cli(["audit", "verify", *store, "--public-key", str(pem), "--offline"]) == 1
    out = capsys.readouterr().out
    assert "record_altered" in out or "record_missing" in out


@pytest.mark.parametrize("assignment", ["kind = 'purge'", "tree_size = 999", "time_ms = 0", "kind = x'ff'"])
async def test_checkpoint_columns_must_match_the_signed_payload(
    sqlite_backend: Backend, key, clock, assignment: str
) -> None:
    await build(sqlite_backend, key, clock)
    sqlite_backend.sql(f"UPDATE audit_checkpoints SET {assignment} WHERE n = 2")
    report = verify(sqlite_backend, key, clock)
    assert [(p.kind, p.checkpoint) for p in report.chains[0].problems] == [("checkpoint_columns_altered", 2)]
