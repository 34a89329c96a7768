"""Health Check and GetLoad keep answering within the container probe's own timeout while
the heaviest generation the logprob budget admits runs (n=16, logprobs=20, max_tokens up to
``limits.max_logprob_entries``), and a request past the budget is refused before it runs.

The probe is the image's HEALTHCHECK command itself (``service.healthcheck``, with its own
deadline), run repeatedly from a thread while the request runs on the server's event loop.
Nothing here is timed by the test: each probe either answers within the probe's deadline or
fails, as it would for Docker or Kubernetes.
"""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from service import healthcheck
from tests.conftest import TINY
from tests.server.stubs import field_violations
from xinserve.v1 import inference_pb2, sampling_pb2, server_pb2, server_pb2_grpc

pytestmark = pytest.mark.asyncio(loop_scope="session")

PROBE_TIMEOUT_S = 3.0  # service.healthcheck's own deadline; Kubernetes' readiness probe has the same


def _probe_until(target: str, done: threading.Event, results: list[tuple[str, bool, str, bool]]) -> None:
    """Probe like the orchestrator: health Check through the HEALTHCHECK command's code, and
    GetLoad (what a load balancer polls), each on a fresh channel, until ``done``. Each result
    is (rpc, answered in time, outcome, whether the request was still running when it ended)."""
    while True:
        finished = done.is_set()
        code = healthcheck.main([target])
        results.append(("Check", code == 0, f"exit {code}", not done.is_set()))
        with grpc.insecure_channel(target) as channel:
            try:
                server_pb2_grpc.ServerServiceStub(channel).GetLoad(server_pb2.GetLoadRequest(), timeout=PROBE_TIMEOUT_S)
                results.append(("GetLoad", True, "OK", not done.is_set()))
            except grpc.RpcError as exc:
                results.append(("GetLoad", False, exc.code().name, not done.is_set()))
        if finished:
            return
        done.wait(0.2)


async def test_probes_answer_while_the_heaviest_admitted_logprob_request_runs(live_server, api):
    limit = live_server.runtime.settings.limits.max_logprob_entries
    n, logprobs = 16, 20
    max_tokens = min(limit // (n * (logprobs + 1)), 1000)
    request = inference_pb2.GenerateRequest(
        model=TINY,
        prompt="the heaviest reply",
        sampling_params=sampling_pb2.SamplingParams(
            n=n, logprobs=logprobs, max_tokens=max_tokens, temperature=1.0, ignore_eos=True, seed=1
        ),
    )
    done = threading.Event()
    results: list[tuple[str, bool, str, bool]] = []
    prober = threading.Thread(target=_probe_until, args=(live_server.target, done, results), daemon=True)
    prober.start()
    try:
        reply = await api.inference.Generate(request, timeout=900)
    finally:
        done.set()
        await asyncio.to_thread(prober.join)
    assert len(reply.outputs) == n
    assert all(len(o.logprobs) == max_tokens for o in reply.outputs)
    assert sum(len(p.candidates) for o in reply.outputs for p in o.logprobs) >= n * logprobs * max_tokens
    failed = [r for r in results if not r[1]]
    assert not failed, f"{len(failed)} of {len(results)} probes failed: {failed[:10]}"
    print(f"{len(results)} probes, {sum(r[3] for r in results)} while the request ran")
    assert any(r[3] for r in results), "no probe ended while the request ran"


async def test_a_request_past_the_budget_is_refused_before_it_runs(live_server, api):
    limit = live_server.runtime.settings.limits.max_logprob_entries
    request = inference_pb2.GenerateRequest(
        model=TINY,
        prompt="too much",
        sampling_params=sampling_pb2.SamplingParams(n=16, logprobs=20, max_tokens=limit // (16 * 21) + 1),
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.inference.Generate(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    found = field_violations(err.value)
    assert str(limit) in found["sampling_params.logprobs"]
    assert "limits.max_logprob_entries" in found["sampling_params.logprobs"]
