"""A structured-output constraint past the limits never reaches vLLM, so it costs the engine
processes no grammar compile: measured as the CPU time of the EngineCore processes (psutil),
not only as the engine's reported load. The real engine: vLLM compiles grammars in the
EngineCore and an abort does not stop a compile, so the request must be refused before."""

from __future__ import annotations

import grpc
import psutil
import pytest

from tests.conftest import TINY
from tests.server.stubs import field_violations
from xinserve.v1 import inference_pb2, sampling_pb2

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.engine]

ENGINE_CPU_BUDGET_S = 5.0
"""EngineCore CPU seconds the refusal and one 4-token generation may take together; the
100,000-choice compile that was refused took minutes of it."""


def _engine_cpu_s() -> float:
    """CPU seconds (user + system) of this process's vLLM EngineCore children so far."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            if "EngineCore" in child.name() or any("EngineCore" in part for part in child.cmdline()):
                times = child.cpu_times()
                total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


async def test_a_huge_choice_list_is_refused_without_engine_work(api):
    assert _engine_cpu_s() > 0, "no EngineCore process found to measure"
    before = _engine_cpu_s()
    choices = [f"choice number {i}" for i in range(100_000)]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.inference.Generate(
            inference_pb2.GenerateRequest(
                model=TINY,
                prompt="pick one",
                sampling_params=sampling_pb2.SamplingParams(
                    max_tokens=4, choice=sampling_pb2.ChoiceList(choices=choices)
                ),
            ),
            timeout=60,
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert "limits.max_structured_choices" in field_violations(err.value)["sampling_params.choice.choices"]
    # The engine still serves at once, and has spent next to nothing meanwhile.
    reply = await api.inference.Generate(
        inference_pb2.GenerateRequest(
            model=TINY, prompt="hi", sampling_params=sampling_pb2.SamplingParams(max_tokens=4, temperature=0.0)
        ),
        timeout=60,
    )
    assert reply.outputs[0].token_ids
    spent = _engine_cpu_s() - before
    assert spent < ENGINE_CPU_BUDGET_S, f"the EngineCore processes spent {spent:.1f} CPU-s"
