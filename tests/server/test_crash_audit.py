"""Crash safety of the whole server (issue 4): kill -9 the server repeatedly while 32 clients
stream; after each restart ``xinserve audit verify`` passes and no record of a call that
completed at the client is missing. Also: the killed server's vLLM engine process dies with it.

The server runs as a real subprocess (``python -m service.cli serve``) over the real engine,
with the built-in tiny Llama copied and signed with a test key, and its embedded SQLite
audit log under a temporary data directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engine_backends.builtin_models import builtin_models
from tests.conftest import REPO, TINY, _data_dir
from trust.model_signing import SIGNATURE_FILENAME, sign_model
from trust.sm2 import Sm2PrivateKey
from trust.trust_store import add_trusted_key
from xinserve.v1 import inference_pb2, inference_pb2_grpc, sampling_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROUNDS = 3
CLIENTS = 32
STARTUP_TIMEOUT_S = float(os.environ.get("XINSERVE_TEST_STARTUP_TIMEOUT_S", "900"))
STREAM = "/xinserve.v1.InferenceService/GenerateStream"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


class ServerProcess:
    """``xinserve serve`` in its own session, restartable on the same port and data dir."""

    def __init__(self, workdir: Path) -> None:
        key = Sm2PrivateKey.generate()
        model = workdir / "model"
        source = next(b.path for b in builtin_models(_data_dir(), [TINY]) if b.name == TINY)
        shutil.copytree(source, model, ignore=shutil.ignore_patterns(SIGNATURE_FILENAME))
        sign_model(model, key, TINY)
        add_trusted_key(workdir / "trust", key.public_key(), "crash-test")
        self.data = workdir / "data"
        self.port = _free_port()
        self.args = [
            sys.executable, "-m", "service.cli", "serve",
            "--listen", f"127.0.0.1:{self.port}", "--no-metrics",
            "--model", f"{TINY}={model}", "--trust-store", str(workdir / "trust"),
            "--data-dir", str(self.data), "--max-in-flight", str(CLIENTS), "--max-queue", str(CLIENTS),
            "--log-format", "json", "--log-level", "warning",
        ]  # fmt: skip
        self.log_path = workdir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.args, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    async def wait_serving(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        async with grpc.aio.insecure_channel(self.target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                assert self.proc is not None and self.proc.poll() is None, self.log_tail()
                try:
                    reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(1)
        pytest.fail(f"server not SERVING within {STARTUP_TIMEOUT_S:.0f} s\n{self.log_tail()}")

    def kill_9(self) -> list[int]:
        """SIGKILL the server process only (not its process group); returns its children's pids."""
        assert self.proc is not None
        children = _children(self.proc.pid)
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        return children

    def cleanup(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "service.cli", "audit", *args, "--store", str(self.data / "audit" / "audit.db")],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


async def _stream_until_killed(server: ServerProcess, kill_after: int) -> tuple[list[str], list[int]]:
    """32 clients stream until ``kill_after`` streams completed, then the server is killed.

    Returns the request ids of the streams that completed (final message and OK status at
    the client) and the server's child processes at the moment of the kill.
    """
    completed: list[str] = []
    enough = asyncio.Event()
    sampling = sampling_pb2.SamplingParams(max_tokens=24, temperature=0.8, seed=7, ignore_eos=True)

    async def client(n: int) -> None:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = inference_pb2_grpc.InferenceServiceStub(channel)
            while True:
                rid = f"crash-{n}-{uuid.uuid4().hex[:12]}"
                request = inference_pb2.GenerateRequest(
                    model=TINY, prompt=f"client {n} asks again", sampling_params=sampling, request_id=rid
                )
                try:
                    finished = False
                    async for message in stub.GenerateStream(request, timeout=120):
                        finished = finished or message.finish_reason != 0
                except grpc.aio.AioRpcError as exc:
                    if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                        return  # the server is gone
                    raise
                assert finished, rid
                completed.append(rid)
                if len(completed) >= kill_after:
                    enough.set()

    tasks = [asyncio.create_task(client(n)) for n in range(CLIENTS)]
    waiter = asyncio.create_task(enough.wait())
    done, _ = await asyncio.wait([waiter, *tasks], timeout=600, return_when=asyncio.FIRST_COMPLETED)
    assert waiter in done, [t.exception() for t in tasks if t.done()] or "no progress within 600 s"
    children = server.kill_9()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, failures
    return list(completed), children


@pytest.mark.timeout(2400)  # four server starts; each can take minutes on a loaded 2-core machine
async def test_kill_9_under_streaming_load_loses_no_completed_call(tmp_path):
    server = ServerProcess(tmp_path)
    public_key = str(server.data / "keys" / "server-sm2.pub.pem")
    all_completed: list[str] = []
    try:
        server.start()
        await server.wait_serving()
        for round_no in range(ROUNDS):
            completed, children = await _stream_until_killed(server, kill_after=40 + 13 * round_no)
            all_completed += completed

            # The engine core must not outlive the server (it would hold the model's memory).
            assert children, "the server had no engine process"
            for _ in range(150):
                survivors = [p for p in children if _alive(p)]
                if not survivors:
                    break
                await asyncio.sleep(0.2)
            assert not survivors, f"engine processes {survivors} survived the server"

            server.start()
            await server.wait_serving()

            verify = server.cli("verify", "--public-key", public_key, "--json")
            assert verify.returncode == 0, (round_no, verify.stdout[-3000:], verify.stderr[-3000:])
            report = json.loads(verify.stdout)
            assert report["ok"] is True
            recoveries = [r for chain in report["chains"] for r in chain["recoveries"]]
            assert len(recoveries) >= round_no + 1, recoveries  # each kill is recovered, not tampering

            export = server.cli("export", "--event", "rpc", "--method", STREAM, "--outcome", "OK")
            assert export.returncode == 0, export.stderr[-3000:]
            recorded = {json.loads(line).get("request_id") for line in export.stdout.splitlines() if line}
            missing = [rid for rid in all_completed if rid not in recorded]
            assert not missing, f"round {round_no}: {len(missing)} completed calls have no record: {missing[:5]}"
    finally:
        server.cleanup()
    assert len(all_completed) >= 40 * ROUNDS
