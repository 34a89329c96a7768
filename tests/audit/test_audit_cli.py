"""``xinserve audit verify | export | tail``: output and exit codes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from audit_helpers import Backend, FakeClock, rpc_record_factory

import audit.cli
from audit.log import AuditLog
from audit.records import canonical_json
from audit.retention import run_retention


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="xinserve")
    sub = parser.add_subparsers(dest="command", required=True)
    audit.cli.add_commands(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


@pytest.fixture
async def populated(sqlite_backend: Backend, key, tmp_path: Path) -> tuple[Backend, Path]:
    log = await AuditLog.open(sqlite_backend.settings(), key, start_ticker=False)
    make = rpc_record_factory()
    for i in range(12):
        await log.append(make(i, outcome="OK" if i % 3 else "PERMISSION_DENIED"))
    await log.close()
    pem = tmp_path / "server.pub.pem"
    pem.write_bytes(key.public_key().to_pem())
    return sqlite_backend, pem


async def test_verify_ok(populated, capsys) -> None:
    backend, pem = populated
    assert run(["audit", "verify", "--store", str(backend.path), "--public-key", str(pem)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("OK   chain node-a: records 1..12")


async def test_verify_names_first_broken_record(populated, capsys) -> None:
    backend, pem = populated
    (body,) = backend.sql("SELECT body FROM audit_records WHERE seq = 7")[0]
    obj = json.loads(bytes(body))
    obj["principal"] = "mallory"
    backend.sql("UPDATE audit_records SET body = ? WHERE seq = 7", (canonical_json(obj),))
    assert run(["audit", "verify", "--store", str(backend.path), "--public-key", str(pem)]) == 1
    out = capsys.readouterr().out
    assert "FAIL chain node-a" in out and "first broken record: 7" in out
    assert run(["audit", "verify", "--store", str(backend.path), "--public-key", str(pem), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["chains"][0]["first_broken"] == 7


async def test_verify_with_wrong_key_fails(populated, other_key, tmp_path, capsys) -> None:
    backend, _ = populated
    pem = tmp_path / "other.pem"
    pem.write_bytes(other_key.public_key().to_pem())
    assert run(["audit", "verify", "--store", str(backend.path), "--public-key", str(pem)]) == 1
    assert "untrusted" in capsys.readouterr().out


async def test_usage_and_environment_errors(populated, tmp_path, capsys) -> None:
    backend, pem = populated
    assert run(["audit", "verify", "--store", str(backend.path)]) == 2
    assert "--public-key is required" in capsys.readouterr().err
    assert run(["audit", "verify", "--store", str(backend.path), "--public-key", str(tmp_path / "nope")]) == 2
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    assert run(["audit", "verify", "--store", str(backend.path), "--public-key", str(bad)]) == 2
    dsn_down = "postgresql://auditor:s3cret@127.0.0.1:1/audit"
    assert run(["audit", "verify", "--store", dsn_down, "--public-key", str(pem)]) == 3
    err = capsys.readouterr().err
    assert "unreachable" in err and "Traceback" not in err and "s3cret" not in err
    assert run(["audit", "export", "--store", str(backend.path), "--since", "yesterday-ish"]) == 2
    dsn = "postgresql://auditor:s3cret@127.0.0.1:1/audit"
    assert run(["audit", "tail", "--store", dsn]) == 3
    err = capsys.readouterr().err
    assert "s3cret" not in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exc:
        run(["audit", "frobnicate"])
    assert exc.value.code == 2


async def test_export_filters_and_checkpoints(populated, tmp_path, capsys) -> None:
    backend, _ = populated
    assert run(["audit", "export", "--store", str(backend.path), "--outcome", "PERMISSION_DENIED"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["seq"] for x in lines] == [1, 4, 7, 10]
    assert all(x["outcome"] == "PERMISSION_DENIED" and x["time"].endswith("Z") for x in lines)
    out = tmp_path / "export.jsonl"
    assert run(["audit", "export", "--store", str(backend.path), "--principal", "user-1", "-o", str(out)]) == 0
    assert {json.loads(x)["principal"] for x in out.read_text().splitlines()} == {"user-1"}
    assert run(["audit", "export", "--store", str(backend.path), "--since", "2000-01-01", "--until", "2000-01-02"]) == 0
    assert capsys.readouterr().out == ""
    assert run(["audit", "export", "--store", str(backend.path), "--checkpoints"]) == 0
    cps = capsys.readouterr().out.splitlines()
    assert len(cps) == 2 and "signature" in json.loads(cps[-1])


async def test_anchor_detects_rollback(populated, tmp_path, capsys) -> None:
    backend, pem = populated
    assert run(["audit", "export", "--store", str(backend.path), "--checkpoints"]) == 0
    anchor = tmp_path / "anchor.json"
    anchor.write_text(capsys.readouterr().out.splitlines()[-1])
    args = ["audit", "verify", "--store", str(backend.path), "--public-key", str(pem), "--anchor", str(anchor)]
    assert run(args) == 0
    backend.sql("DELETE FROM audit_checkpoints WHERE n = 2")
    backend.sql("DELETE FROM audit_records WHERE seq > 6")
    assert run([*args, "--offline"]) == 1
    assert "anchor_missing" in capsys.readouterr().out


async def test_tail(populated, capsys) -> None:
    backend, _ = populated
    assert run(["audit", "tail", "--store", str(backend.path), "-n", "3"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["seq"] for x in lines] == [10, 11, 12]


async def test_verify_archive(sqlite_backend: Backend, key, tmp_path, capsys) -> None:
    clock = FakeClock()
    log = await AuditLog.open(sqlite_backend.settings(), key, clock=clock, start_ticker=False)
    make = rpc_record_factory(clock)
    for i in range(5):
        await log.append(make(i))
    await log.close()
    clock.advance(days=200)
    log = await AuditLog.open(sqlite_backend.settings(), key, clock=clock, start_ticker=False)
    result = await run_retention(log)
    await log.close()
    pem = tmp_path / "pub.pem"
    pem.write_bytes(key.public_key().to_pem())
    assert result.archive is not None
    assert run(["audit", "verify", "--archive", str(result.archive), "--public-key", str(pem)]) == 0
    assert "OK" in capsys.readouterr().out


async def test_seal_an_orphaned_chain(sqlite_backend: Backend, key, tmp_path, capsys) -> None:
    import asyncio
    import time

    from audit.stores import open_store
    from audit.verify import verify_store

    log = await AuditLog.open(sqlite_backend.settings(node_id="replica-7"), key, start_ticker=False)
    make = rpc_record_factory()
    for i in range(3):
        await log.append(make(i))
    await log.abort()  # crashed, and the replica is gone for good
    tomorrow = int(time.time() * 1000) + 86_400_000
    with open_store(sqlite_backend.settings()) as store:
        report = verify_store(store, [key.public_key()], now_ms=tomorrow)
    assert {p.kind for p in report.chains[0].problems} == {"stale"}

    pem = tmp_path / "server.pem"
    pem.write_bytes(key.to_pem())
    args = ["audit", "seal", "--store", str(sqlite_backend.path), "--chain", "replica-7", "--key", str(pem)]
    pem.chmod(0o644)
    assert await asyncio.to_thread(run, args) == 2  # a key others can read is refused
    assert "chmod 600" in capsys.readouterr().err
    pem.chmod(0o600)
    assert await asyncio.to_thread(run, args) == 0  # the CLI runs its own event loop
    assert "3 unsigned records were intact" in capsys.readouterr().out
    with open_store(sqlite_backend.settings()) as store:
        report = verify_store(store, [key.public_key()], now_ms=tomorrow)
    assert report.ok, report.to_json()
    assert report.chains[0].closed and report.chains[0].recoveries


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err and "unexpected error" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


async def test_verify_range_past_the_end_is_a_usage_error(populated, capsys) -> None:
    backend, pem = populated
    base = ["audit", "verify", "--store", str(backend.path), "--public-key", str(pem)]
    assert run([*base, "--from", "100000"]) == 2
    assert "its last record is 12" in _one_line_error(capsys.readouterr().err)
    assert run([*base, "--from", "12"]) == 0
    assert "records 12..12" in capsys.readouterr().out
    backend.sql("DELETE FROM audit_records WHERE seq > 9")  # the closing checkpoint covers 12
    assert run([*base, "--from", "11"]) == 1
    assert "truncated" in capsys.readouterr().out


@pytest.mark.parametrize("state", ["no_tables", "no_records"])
async def test_verify_of_an_empty_store_fails_unless_allowed(backend: Backend, key, tmp_path, capsys, state) -> None:
    from audit.stores import open_store

    pem = tmp_path / "server.pub.pem"
    pem.write_bytes(key.public_key().to_pem())
    if backend.kind == "sqlite":
        backend.sql("CREATE TABLE unrelated (x INTEGER)")
    if state == "no_records":
        with open_store(backend.settings()) as store:
            store.create_schema()
    base = ["audit", "verify", "--store", backend.url, "--public-key", str(pem), "--offline"]
    assert run(base) == 1
    assert capsys.readouterr().out.startswith("FAIL no audit records or checkpoints found")
    assert run([*base, "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == {"ok": False, "chains": [], "empty": "no_records"}
    assert run([*base, "--allow-empty"]) == 0
    assert capsys.readouterr().out.startswith("OK   no audit records or checkpoints found (--allow-empty)")


async def test_verify_of_a_missing_store_fails_unless_allowed(key, tmp_path, capsys) -> None:
    pem = tmp_path / "server.pub.pem"
    pem.write_bytes(key.public_key().to_pem())
    base = ["audit", "verify", "--store", str(tmp_path / "missing.db"), "--public-key", str(pem)]
    assert run(base) == 1
    assert capsys.readouterr().out.startswith("FAIL the audit database does not exist")
    assert run([*base, "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == {"ok": False, "chains": [], "empty": "missing"}
    assert run([*base, "--allow-empty"]) == 0
    assert "does not exist (--allow-empty)" in capsys.readouterr().out


async def test_verify_unknown_chain_is_a_usage_error(populated, tmp_path, capsys) -> None:
    backend, pem = populated
    assert run(["audit", "verify", "--store", str(backend.path), "--public-key", str(pem), "--chain", "nochain"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "'nochain'" in line and "node-a" in line
    from audit.stores import open_store

    empty = Backend("sqlite", tmp_path / "empty", None)
    empty.tmp_path.mkdir()
    with open_store(empty.settings()) as store:
        store.create_schema()
    assert run(["audit", "verify", "--store", str(empty.path), "--public-key", str(pem), "--chain", "x"]) == 2
    assert "the store holds no chain" in _one_line_error(capsys.readouterr().err)


async def test_verify_lists_a_chain_that_ends_before_the_range(populated, key, capsys) -> None:
    backend, pem = populated
    log = await AuditLog.open(backend.settings(node_id="node-b"), key, start_ticker=False)
    await log.append(rpc_record_factory()(0))
    await log.close()
    assert run(["audit", "verify", "--store", str(backend.path), "--public-key", str(pem), "--from", "5"]) == 0
    out = capsys.readouterr().out
    assert "OK   chain node-a: records 5..12" in out
    assert "OK   chain node-b: no records from 5 on (last record: 1)" in out


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--from", "0"], "--from must be"),
        (["--from", "-5"], "--from must be"),
        (["--to", "0"], "--to must be"),
        (["--from", "10", "--to", "5"], "--from 10 is after --to 5"),
        (["--from", str(2**53)], "--from must be"),
        (["--from", "99999999999999999999"], "--from must be"),
    ],
)
async def test_verify_rejects_bad_ranges(populated, capsys, extra, needle) -> None:
    backend, pem = populated
    assert run(["audit", "verify", "--store", str(backend.path), "--public-key", str(pem), *extra]) == 2
    assert needle in _one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--until", "99999999999999999999"], "--until: time"),
        (["--since", "-5"], "--since: time"),
        (["--since", "1969-12-31"], "--since: time"),
        (["--since", str(2**53)], "out of range"),
        (["--since", "2026-02-01", "--until", "2026-01-01"], "--until must be later than --since"),
        (["--since", "2026-01-01", "--until", "2026-01-01"], "--until must be later than --since"),
        (["--principal", "x" * 513], "--principal is longer than 512 characters"),
        (["--method", "m" * 513], "--method is longer than 512 characters"),
        (["--since", ""], "not a time"),
        (["--limit", "0"], "--limit must be from 1"),
        (["--limit", "-3"], "--limit must be from 1"),
        (["--limit", str(2**64)], "--limit must be from 1"),
        (["--event", "bogus"], "rpc, start, stop"),
        (["--outcome", "FOO"], "OK, CANCELLED, UNKNOWN"),
        (["--outcome", "42"], "not a gRPC status code name"),
        (["--chain", "nochain"], "node-a"),
        (["--chain", "nochain", "--checkpoints"], "node-a"),
    ],
)
async def test_export_rejects_bad_filters(populated, capsys, extra, needle) -> None:
    backend, _ = populated
    assert run(["audit", "export", "--store", str(backend.path), *extra]) == 2
    assert needle in _one_line_error(capsys.readouterr().err)
    assert capsys.readouterr().out == ""


async def test_export_filter_names_in_any_case(populated, capsys) -> None:
    backend, _ = populated
    for outcome in ("PERMISSION_DENIED", "permission_denied"):
        assert run(["audit", "export", "--store", str(backend.path), "--outcome", outcome]) == 0
        assert [json.loads(x)["seq"] for x in capsys.readouterr().out.splitlines()] == [1, 4, 7, 10]
    assert run(["audit", "export", "--store", str(backend.path), "--event", "RPC", "--limit", "2"]) == 0
    assert [json.loads(x)["seq"] for x in capsys.readouterr().out.splitlines()] == [1, 2]
    assert run(["audit", "export", "--store", str(backend.path), "--event", "start"]) == 0  # valid, none here
    assert capsys.readouterr().out == ""
    assert run(["audit", "export", "--store", str(backend.path), "--since", "0", "--until", str(2**53 - 1)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 12


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["-n", "-1"], "--lines must be"),
        (["-n", str(2**63)], "--lines must be"),
        (["-f", "--interval", "0"], "--interval must be"),
        (["-f", "--interval", "-1"], "--interval must be"),
        (["-f", "--interval", "nan"], "--interval must be"),
        (["--chain", "nochain"], "node-a"),
    ],
)
async def test_tail_rejects_bad_options(populated, capsys, extra, needle) -> None:
    backend, _ = populated
    assert run(["audit", "tail", "--store", str(backend.path), *extra]) == 2
    assert needle in _one_line_error(capsys.readouterr().err)


def test_outcome_names_are_the_grpc_status_codes() -> None:
    import grpc

    from audit.query import GRPC_STATUS_NAMES

    assert GRPC_STATUS_NAMES == tuple(code.name for code in grpc.StatusCode)
