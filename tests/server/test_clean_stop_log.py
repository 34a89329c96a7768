"""A clean stop (SIGTERM, exit 0) of the real server over the real vLLM engine logs no error.

The server runs as a subprocess (``tests.server.test_crash_audit.ServerProcess``: the built-in
tiny Llama, signed with a test key), serves one call, and is sent SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal

import grpc
import pytest

from tests.conftest import TINY
from tests.server.test_crash_audit import ServerProcess
from xinserve.v1 import inference_pb2, inference_pb2_grpc, sampling_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_sigterm_after_a_call_exits_0_and_logs_no_error(tmp_path) -> None:
    server = ServerProcess(tmp_path)
    server.args[server.args.index("warning")] = "info"
    server.start()
    try:
        await server.wait_serving()
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = inference_pb2_grpc.InferenceServiceStub(channel)
            reply = await stub.Generate(
                inference_pb2.GenerateRequest(
                    model=TINY, prompt="hello", sampling_params=sampling_pb2.SamplingParams(max_tokens=4)
                ),
                timeout=300,
            )
            assert reply.outputs and reply.usage.completion_tokens > 0
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        rc = await asyncio.to_thread(server.proc.wait, 300)
    finally:
        server.cleanup()
    log = server.log_path.read_text(errors="replace")
    assert rc == 0, log[-4000:]
    errors = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if isinstance(entry, dict):
            if entry.get("level") in ("error", "critical") or "exception" in entry:
                errors.append(line)
        elif "Traceback" in line or "ERROR" in line or "output_handler failed" in line:
            errors.append(line)
    assert not errors, "\n".join(errors)
