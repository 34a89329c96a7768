"""Audit log benchmark: durable appends/s with group commit, latency per append, verification speed.

    uv run --no-sync python benchmarks/audit_throughput.py [--records 200000] [--clients 256]
        [--dir /var/tmp] [--dsn postgresql://...]

Every append is durable when it returns (SQLite WAL + synchronous=FULL, or PostgreSQL with
synchronous_commit=on). Not a test: figures go to benchmarks/README.md ("Audit log").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pydantic import SecretStr

from audit.chain import chain_hash
from audit.config import AuditSettings, StoreKind
from audit.log import AuditLog
from audit.records import AuditRecord, EventType
from audit.stores import open_store
from audit.verify import verify_store
from trust.sm2 import Sm2PrivateKey


def record(i: int) -> AuditRecord:
    return AuditRecord(
        event=EventType.RPC,
        principal=f"CN=client-{i % 50},O=Bank",
        auth_method="mtls",
        cert_fingerprint="ab" * 32,
        peer="ipv4:10.1.2.3:51234",
        method="/xinserve.v1.InferenceService/Generate",
        model="qwen2.5-7b-instruct",
        outcome="OK",
        request_id=f"0f8c2b1e-{i:012d}",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        prompt_tokens=120,
        output_tokens=256,
        latency_us=812_345,
        prompt_sm3="cd" * 32,
        output_sm3="ef" * 32,
    )


async def throughput(
    settings: AuditSettings, key: Sm2PrivateKey, n: int, clients: int
) -> tuple[float, list[float], float]:
    """(appends/s, per-append latencies, process CPU seconds per append)."""
    log = await AuditLog.open(settings, key)
    lat: list[float] = []
    per = n // clients

    async def client(c: int) -> None:
        for i in range(per):
            t0 = time.perf_counter()
            await log.append(record(c * per + i))
            lat.append(time.perf_counter() - t0)

    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(client(c) for c in range(clients)))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    await log.close()
    return per * clients / elapsed, lat, cpu / (per * clients)


async def calls_with_begin(
    settings: AuditSettings, key: Sm2PrivateKey, n_calls: int, clients: int
) -> tuple[float, list[float]]:
    """Streamed calls as the server records them with begin records: each call appends its
    ``rpc_begin`` record (durable before its first output) and then its ``rpc`` record.

    Returns (calls/s, per-call audit latency: both appends, in seconds)."""
    log = await AuditLog.open(settings, key)
    lat: list[float] = []
    per = n_calls // clients

    async def client(c: int) -> None:
        for i in range(per):
            end = record(c * per + i)
            t0 = time.perf_counter()
            await log.append(
                AuditRecord(
                    event=EventType.RPC_BEGIN,
                    principal=end.principal,
                    auth_method=end.auth_method,
                    peer=end.peer,
                    method=end.method,
                    model=end.model,
                    request_id=end.request_id,
                    trace_id=end.trace_id,
                )
            )
            await log.append(end)
            lat.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    elapsed = time.perf_counter() - t0
    await log.close()
    return per * clients / elapsed, lat


async def sequential_latency(settings: AuditSettings, key: Sm2PrivateKey, n: int) -> list[float]:
    log = await AuditLog.open(settings, key)
    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        await log.append(record(i))
        lat.append(time.perf_counter() - t0)
    await log.close()
    return lat


def fsync_p50(directory: Path) -> float:
    """The device's own durable-write latency: p50 of write(4 KiB) + fsync, in ms."""
    path = directory / "fsync.probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    lat = []
    try:
        for _ in range(200):
            os.write(fd, b"x" * 4096)
            t0 = time.perf_counter()
            os.fsync(fd)
            lat.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(lat) * 1000


def store_write_ceiling(settings: AuditSettings, directory: Path, batch: int) -> tuple[float, float]:
    """Peer for the append rate: the store's own ``write`` of the same, already encoded rows.

    The rows the log wrote are copied into a fresh SQLite file through ``SqliteStore.write``
    in transactions of ``batch`` rows, from one thread: no asyncio, no encoding, no SM3, same
    schema and durability. Returns (rows/s, process CPU seconds per row).
    """
    with open_store(settings) as store:
        rows = list(store.records(settings.node_id, 1, 2**62))
    ceiling = settings.model_copy(update={"path": directory / "ceiling.db"})
    with open_store(ceiling) as store:
        store.create_schema()
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(0, len(rows), batch):
            store.write(rows[i : i + batch], [])
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    return len(rows) / elapsed, cpu / len(rows)


def read_and_hash_ceiling(settings: AuditSettings) -> float:
    """Peer for verification: read every record once and SM3 it, nothing else (records/s)."""
    with open_store(settings) as store:
        t0, n = time.perf_counter(), 0
        for _, body, stored in store.iter_hashes(settings.node_id, 1, None):
            chain_hash(stored, body)
            n += 1
        return n / (time.perf_counter() - t0)


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--clients", type=int, default=256)
    ap.add_argument("--rpc-clients", type=int, default=32, help="concurrency for the per-RPC latency figure")
    ap.add_argument("--peer-batch", type=int, default=256, help="rows per transaction of the store-write peer")
    ap.add_argument("--dir", type=Path, default=None, help="directory for the SQLite file (default: a temp dir)")
    ap.add_argument("--dsn", help="also benchmark this PostgreSQL database")
    args = ap.parse_args()
    key = Sm2PrivateKey.generate()
    base = Path(tempfile.mkdtemp(prefix="audit-bench-", dir=args.dir))
    run_id = f"bench-{os.getpid()}-{int(time.time())}"  # a fresh chain per run (PostgreSQL keeps old ones)
    targets = [("sqlite", AuditSettings(store=StoreKind.SQLITE, path=base / "audit.db", node_id=run_id))]
    if args.dsn:
        targets.append(
            (
                "postgresql",
                AuditSettings(
                    store=StoreKind.POSTGRESQL, dsn=SecretStr(args.dsn), node_id=run_id, retention_enabled=False
                ),
            )
        )
    print(
        f"# {platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
        f"python {platform.python_version()}; store dir {base}"
    )
    print(f"# device fsync p50 (write 4 KiB + fsync): {fsync_p50(base):.3f} ms")
    try:
        await run_targets(args, key, targets, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def run_targets(
    args: argparse.Namespace, key: Sm2PrivateKey, targets: list[tuple[str, AuditSettings]], base: Path
) -> None:
    for name, settings in targets:
        rate, _, cpu = await throughput(settings, key, args.records, args.clients)
        print(
            f"{name}: durable appends/s with group commit ({args.clients} concurrent appenders): {rate:,.0f} "
            f"(process CPU {cpu * 1e6:.1f} us/append, i.e. {1 / cpu:,.0f}/s per fully available core)"
        )
        if settings.store is StoreKind.SQLITE:
            peer, peer_cpu = store_write_ceiling(settings, base, args.peer_batch)
            print(
                f"{name}: peer, SqliteStore.write of the same encoded rows, {args.peer_batch} per transaction, "
                f"one thread: {peer:,.0f} rows/s (CPU {peer_cpu * 1e6:.1f} us/row); "
                f"AuditLog reaches {rate / peer:.2f}x of it"
            )
        rate32, lat32, _ = await throughput(
            settings.model_copy(update={"node_id": settings.node_id + "-rpc"}), key, 20_000, args.rpc_clients
        )
        print(
            f"{name}: latency per append at {args.rpc_clients} concurrent RPCs: p50 {pct(lat32, 50):.3f} ms, "
            f"p99 {pct(lat32, 99):.3f} ms ({rate32:,.0f} appends/s)"
        )
        calls, call_lat = await calls_with_begin(
            settings.model_copy(update={"node_id": settings.node_id + "-begin"}), key, 10_000, args.rpc_clients
        )
        print(
            f"{name}: streamed calls with a begin record ({args.rpc_clients} concurrent, 2 appends per call): "
            f"{calls:,.0f} calls/s ({2 * calls:,.0f} appends/s); audit latency per call p50 "
            f"{pct(call_lat, 50):.3f} ms, p99 {pct(call_lat, 99):.3f} ms (vs one append p50 {pct(lat32, 50):.3f} ms)"
        )
        lat1 = await sequential_latency(settings.model_copy(update={"node_id": settings.node_id + "-seq"}), key, 2000)
        print(f"{name}: latency per append, one caller (one fsync each): p50 {pct(lat1, 50):.3f} ms")
        with open_store(settings) as store:
            t0, c0 = time.perf_counter(), time.process_time()
            report = verify_store(store, [key.public_key()], chain=settings.node_id)
            elapsed, vcpu = time.perf_counter() - t0, time.process_time() - c0
        assert report.ok, report.to_json()
        vrate = report.records_checked / elapsed
        print(
            f"{name}: verification: {vrate:,.0f} records/s "
            f"({report.records_checked:,} records; {report.records_checked / vcpu:,.0f}/s per CPU second)"
        )
        if settings.store is StoreKind.SQLITE:
            peer = read_and_hash_ceiling(settings)
            print(
                f"{name}: peer, read every record and SM3 it once: {peer:,.0f} records/s; "
                f"verification reaches {vrate / peer:.2f}x of it"
            )


if __name__ == "__main__":
    asyncio.run(main())
