"""SIGTERM while the model loads: the real server (``python -m service.cli serve`` over the
real vLLM engine, the built-in tiny Llama signed with a test key,
``tests.server.test_crash_audit.ServerProcess``) cancels the load, stops the engine-core
process it was starting (and that process's workers), logs ``stopped`` once and exits 0
within the documented bound (README, *Shutdown*).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time

import psutil
import pytest

from engine_backends.vllm_compat import ENGINE_STOP_GRACE_S
from service.lifecycle.exit_codes import ExitCode
from tests.server.test_crash_audit import STARTUP_TIMEOUT_S, ServerProcess

pytestmark = pytest.mark.asyncio(loop_scope="session")

STOP_BOUND_S = ENGINE_STOP_GRACE_S + 40.0
"""The README's bound (engine stop grace + 10 s), with 30 s more for a loaded CI machine."""


def _events(log: str) -> list[str]:
    events = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            events.append(str(entry.get("event")))
    return events


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.NoSuchProcess:
        return ""


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _engine_worker(parent: psutil.Process) -> psutil.Process | None:
    """A vLLM worker process under the server's engine-core process (``VLLM::Worker``), if any."""
    for child in parent.children(recursive=True):
        try:
            if "Worker" in child.name():
                return child
        except psutil.NoSuchProcess:
            continue
    return None


async def test_sigterm_while_loading_stops_the_engine_and_exits_0(tmp_path) -> None:
    server = ServerProcess(tmp_path)
    server.args[server.args.index("warning")] = "info"
    server.start()
    assert server.proc is not None
    alive: list[psutil.Process] = []
    try:
        parent = psutil.Process(server.proc.pid)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while _engine_worker(parent) is None:
            assert server.proc.poll() is None, server.log_tail()
            assert time.monotonic() < deadline, (
                f"no engine worker within {STARTUP_TIMEOUT_S:.0f} s\n{server.log_tail()}"
            )
            await asyncio.sleep(0.2)
        tree = [parent, *parent.children(recursive=True)]
        assert "serving" not in _events(server.log_path.read_text(errors="replace")), "loaded before SIGTERM"
        cores = [p for p in tree if "EngineCore" in _name(p)]
        assert cores, [_name(p) for p in tree]
        server.proc.send_signal(signal.SIGTERM)
        stop_deadline = time.monotonic() + STOP_BOUND_S
        while "stopped" not in _events(server.log_path.read_text(errors="replace")):
            if server.proc.poll() is not None or time.monotonic() > stop_deadline:
                break
            await asyncio.sleep(0.1)
        running_at_stopped = [f"{p.pid} {_name(p)}" for p in cores if _running(p)]
        _, alive = await asyncio.to_thread(psutil.wait_procs, tree, max(1.0, stop_deadline - time.monotonic()))
        rc = server.proc.poll()
        left = [f"{p.pid} {_name(p)}" for p in alive if _running(p)]
    finally:
        for proc in alive:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        server.cleanup()
    log = server.log_path.read_text(errors="replace")
    assert not left, f"still running {STOP_BOUND_S:.0f} s after SIGTERM: {left}\n{log[-4000:]}"
    assert rc == ExitCode.OK, log[-4000:]
    assert not running_at_stopped, f"'stopped' logged while the engine core ran: {running_at_stopped}"
    events = _events(log)
    assert "serving" not in events, "the model finished loading before SIGTERM took effect"
    assert events.count("stopped") == 1 and events[-1] == "stopped", events[-10:]
