"""A unary Generate whose deadline expires mid-generation is DEADLINE_EXCEEDED, and its audit
record counts the tokens the engine had generated (the engine sends a unary call's output
only at the end, so the count comes from the aborted request's last output).

The deadline has to expire after the first token and before the last one. How long that
takes depends on the machine's load, so the deadline is adapted: doubled when it expired
before the engine generated anything (vLLM's own ``vllm:generation_tokens`` counter did not
move: this test's request is the only one the session's engine runs), shortened when the
whole completion fit in it. Only an attempt where it expired mid-generation is judged.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import grpc
import pytest
from prometheus_client import REGISTRY

from audit import QueryFilter, decode_record
from tests.conftest import TINY
from xinserve.v1 import inference_pb2, sampling_pb2, server_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")

MAX_TOKENS = 2000
ATTEMPTS = 12


def vllm_generated_tokens(model: str) -> float:
    """vLLM's ``vllm:generation_tokens_total`` for ``model`` (this process's registry)."""
    return sum(
        sample.value
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name == "vllm:generation_tokens_total" and sample.labels.get("model_name") == model
    )


async def rpc_record(live_server, request_id: str, since_ms: int, limit_s: float = 120.0):
    """The call's ``rpc`` audit record, once written (it is written after the client left)."""
    give_up = time.monotonic() + limit_s
    while True:
        for row in await live_server.runtime.audit.log.query(QueryFilter(since_ms=since_ms)):
            _, _, record = decode_record(row.body)
            if record.request_id == request_id and record.event == "rpc":
                return record
        assert time.monotonic() < give_up, f"no rpc record for {request_id} after {limit_s} s"
        await asyncio.sleep(0.1)


async def engine_idle(api, limit_s: float = 120.0) -> None:
    give_up = time.monotonic() + limit_s
    while True:
        load = await api.server.GetLoad(server_pb2.GetLoadRequest())
        if load.running == 0 and load.waiting == 0:
            return
        assert time.monotonic() < give_up, f"engine still busy after {limit_s} s: {load}"
        await asyncio.sleep(0.05)


async def test_unary_deadline_records_the_tokens_generated_before_it(api, live_server):
    timeout_s = 0.25
    tried = []
    for _ in range(ATTEMPTS):
        await engine_idle(api)
        request_id = "deadline-" + uuid.uuid4().hex[:12]
        since_ms = int(time.time() * 1000) - 1000
        before = vllm_generated_tokens(TINY)
        request = inference_pb2.GenerateRequest(
            model=TINY,
            prompt="count forever",
            request_id=request_id,
            sampling_params=sampling_pb2.SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True),
        )
        try:
            await api.inference.Generate(request, timeout=timeout_s)
            code = grpc.StatusCode.OK
        except grpc.aio.AioRpcError as err:
            code = err.code()
        record = await rpc_record(live_server, request_id, since_ms)
        generated = vllm_generated_tokens(TINY) - before
        tried.append((timeout_s, code.name, generated, record.output_tokens))
        if code == grpc.StatusCode.OK:
            timeout_s /= 2  # the whole completion fit in the deadline
            continue
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED, tried
        assert record.outcome == "DEADLINE_EXCEEDED", tried
        if generated == 0:
            timeout_s *= 2  # expired before the first token
            continue
        # Expired mid-generation: the record counts what the engine generated.
        assert record.output_tokens is not None and 0 < record.output_tokens < MAX_TOKENS, tried
        await engine_idle(api)
        return
    pytest.fail(f"no attempt's deadline expired mid-generation: (timeout_s, code, generated, recorded) {tried}")
