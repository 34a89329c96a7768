"""``xinserve audit``: hostile arguments and anchors (wrong keys, unknown chains, forged anchors,
foreign lines in a collector's file, filters that are not UTF-8)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

import pytest
from audit_helpers import Backend, rpc_record_factory

import audit.cli
from audit.log import AuditLog
from audit.stores import open_store


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="xinserve")
    sub = parser.add_subparsers(dest="command", required=True)
    audit.cli.add_commands(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def one_line(err: str) -> str:
    assert "Traceback" not in err and "unexpected error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def store_state(backend: Backend) -> list[tuple[object, ...]]:
    """Every record and checkpoint the store holds (to prove a refusal wrote nothing)."""
    return backend.sql("SELECT chain, seq, hash FROM audit_records ORDER BY chain, seq") + backend.sql(
        "SELECT chain, n, payload FROM audit_checkpoints ORDER BY chain, n"
    )


@pytest.fixture
async def crashed(sqlite_backend: Backend, key, tmp_path: Path) -> tuple[Backend, Path]:
    """A chain ``local`` whose writer crashed after a clean checkpoint and 3 more records."""
    log = await AuditLog.open(sqlite_backend.settings(node_id="local"), key, start_ticker=False)
    make = rpc_record_factory()
    for i in range(3):
        await log.append(make(i))
    await log.close()
    log = await AuditLog.open(sqlite_backend.settings(node_id="local"), key, start_ticker=False)
    for i in range(3):
        await log.append(make(i))
    await log.abort()
    pub = tmp_path / "server.pub.pem"
    pub.write_bytes(key.public_key().to_pem())
    return sqlite_backend, pub


def private_pem(k, path: Path) -> Path:  # type: ignore[no-untyped-def]
    path.write_bytes(k.to_pem())
    path.chmod(0o600)
    return path


async def test_seal_refuses_a_key_that_is_not_the_chains(crashed, other_key, key, tmp_path, capsys) -> None:
    backend, _ = crashed
    before = store_state(backend)
    wrong = private_pem(other_key, tmp_path / "other.pem")
    args = ["audit", "seal", "--store", str(backend.path), "--chain", "local", "--key", str(wrong)]
    assert await asyncio.to_thread(run, args) == 2
    line = one_line(capsys.readouterr().err)
    assert "key" in line and other_key.public_key().key_id in line and key.public_key().key_id in line
    assert store_state(backend) == before
    right = private_pem(key, tmp_path / "server.pem")
    args[-1] = str(right)
    assert await asyncio.to_thread(run, args) == 0
    assert "3 unsigned records were intact" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["nope", 'x"y', "n" * 100_000])
async def test_seal_only_chains_the_store_holds(crashed, key, tmp_path, capsys, name: str) -> None:
    backend, _ = crashed
    before = store_state(backend)
    pem = private_pem(key, tmp_path / "server.pem")
    args = ["audit", "seal", "--store", str(backend.path), "--chain", name, "--key", str(pem)]
    assert await asyncio.to_thread(run, args) == 2
    line = one_line(capsys.readouterr().err)
    assert "--chain" in line and len(line) < 1000
    assert ("the store holds: local" in line) if len(name) <= 128 else ("1 to 128 characters" in line)
    assert store_state(backend) == before
    with open_store(backend.settings()) as store:
        assert store.chains() == ["local"]


async def test_a_forged_anchor_is_a_bad_signature_not_a_deleted_chain(crashed, key, tmp_path, capsys) -> None:
    backend, pub = crashed
    assert run(["audit", "export", "--store", str(backend.path), "--checkpoints"]) == 0
    exported = capsys.readouterr().out.splitlines()[-1]
    assert '\\"chain\\":\\"local\\"' in exported
    forged = tmp_path / "forged.json"
    forged.write_text(exported.replace('\\"chain\\":\\"local\\"', '\\"chain\\":\\"other\\"'))
    base = ["audit", "verify", "--store", str(backend.path), "--public-key", str(pub), "--offline", "--json"]
    assert run([*base, "--anchor", str(forged)]) == 1
    report = json.loads(capsys.readouterr().out)
    kinds = {c["chain"]: {p["kind"] for p in c["problems"]} for c in report["chains"]}
    assert kinds["other"] == {"anchor_bad_signature"}, kinds
    assert "anchor_missing" not in {k for ks in kinds.values() for k in ks}
    # the store gone too: still no conclusion from a forged anchor
    os.unlink(backend.path)
    assert run([*base, "--anchor", str(forged)]) == 1
    report = json.loads(capsys.readouterr().out)
    kinds = {c["chain"]: {p["kind"] for p in c["problems"]} for c in report["chains"]}
    assert kinds == {"other": {"anchor_bad_signature"}}, kinds


async def test_foreign_lines_in_the_collector_file_do_not_void_the_anchors(crashed, tmp_path, capsys) -> None:
    backend, pub = crashed
    assert run(["audit", "export", "--store", str(backend.path), "--checkpoints"]) == 0
    ours = capsys.readouterr().out.splitlines()
    stream = tmp_path / "stream.log"
    with stream.open("wb") as fh:
        fh.write(b"<13>1 2026-12-01T10:00:00Z shop pos 77 - - caf\xe9 au lait\n")
        for line in ours:
            fh.write(b"<134>1 2026-12-01T10:00:01Z node xinserve-audit 1 - - " + line.encode() + b"\n")
        fh.write(b'<13>1 2026-12-01T10:00:02Z shop pos 77 - - \x00\xff{"anchor"\n')
    base = ["audit", "verify", "--store", str(backend.path), "--public-key", str(pub), "--offline"]
    assert run([*base, "--anchor", str(stream)]) == 0, capsys.readouterr()
    captured = capsys.readouterr()
    assert "OK   chain local" in captured.out
    assert "2 lines" in captured.err and "skipped" in captured.err
    # the anchors still bite: with the log rolled back past them, verify fails
    backend.sql("DELETE FROM audit_checkpoints WHERE n > 1")
    assert run([*base, "--anchor", str(stream)]) == 1
    assert "anchor_missing" in capsys.readouterr().out


async def test_our_malformed_anchor_frame_is_still_reported(crashed, tmp_path, capsys) -> None:
    backend, pub = crashed
    stream = tmp_path / "stream.log"
    stream.write_bytes(
        b"<13>1 2026-12-01T10:00:00Z shop pos 77 - - caf\xe9\n"
        b'<134>1 2026-12-01T10:00:01Z node xinserve-audit 1 - - {"anchor": "record", "chain": "local", '
        b'"seq": 1, "hash": "zz\xe9"}\n'
    )
    base = ["audit", "verify", "--store", str(backend.path), "--public-key", str(pub), "--offline"]
    assert run([*base, "--anchor", str(stream)]) == 2
    assert "malformed" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("command", "option", "value"),
    [
        ("export", "--principal", b"\xff"),
        ("export", "--method", b"a\xffb"),
        ("export", "--chain", b"a\xffb"),
        ("tail", "--chain", b"a\xffb"),
        ("verify", "--chain", b"a\xffb"),
    ],
)
async def test_filters_that_are_not_utf8_are_usage_errors(
    crashed, capsys, command: str, option: str, value: bytes
) -> None:
    backend, pub = crashed
    args = ["audit", command, "--store", str(backend.path), option, os.fsdecode(value)]
    if command == "verify":
        args += ["--public-key", str(pub)]
    assert run(args) == 2
    line = one_line(capsys.readouterr().err)
    assert option in line and "UTF-8" in line
