"""The Prometheus exposition: xinserve's own metrics and vLLM's, for every loaded model."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import MINILM, TINY
from xinserve.v1 import inference_pb2, sampling_pb2

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _scrape() -> dict[str, list]:
    """name -> samples, parsed back from the text the metrics endpoint serves."""
    text = generate_latest(REGISTRY).decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def _value(samples, name: str, **labels: str) -> float:
    return sum(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


async def test_vllm_metrics_cover_every_loaded_model(api):
    # Before the fix, vLLM's stat logger of the second model unregistered the first one's
    # collectors (and two models loading at once failed with "Duplicated timeseries").
    families = _scrape()
    running = families["vllm:num_requests_running"]
    assert {s.labels["model_name"] for s in running} >= {TINY, MINILM}


async def test_generate_counts_in_both_xinserve_and_vllm_metrics(api):
    before = _scrape()
    request = inference_pb2.GenerateRequest(
        model=TINY, prompt="count me", sampling_params=sampling_pb2.SamplingParams(max_tokens=3, temperature=0.0)
    )
    reply = await api.inference.Generate(request)
    after = _scrape()

    ok = {"method": "Generate", "code": "OK"}
    assert _value(after["xinserve_requests"], "xinserve_requests_total", **ok) == (
        _value(before["xinserve_requests"], "xinserve_requests_total", **ok) + 1
    )
    produced = len(reply.outputs[0].token_ids)
    assert produced == 3
    assert _value(after["xinserve_generation_tokens"], "xinserve_generation_tokens_total", model=TINY) == (
        _value(before["xinserve_generation_tokens"], "xinserve_generation_tokens_total", model=TINY) + produced
    )
    # vLLM records its iteration stats after the output reached the caller: poll briefly.
    tiny = {"model_name": TINY}
    want = _value(before["vllm:generation_tokens"], "vllm:generation_tokens_total", **tiny) + produced
    for _ in range(50):
        got = _value(_scrape()["vllm:generation_tokens"], "vllm:generation_tokens_total", **tiny)
        if got >= want:
            break
        await asyncio.sleep(0.1)
    assert got == want


async def test_engine_load_is_exported_per_model_without_anyone_calling_getload(api):
    # Before the fix these gauges were only set as a side effect of ServerService.GetLoad,
    # so a scrape showed HELP/TYPE lines and no samples.
    idle = _scrape()
    assert {s.labels["model"] for s in idle["xinserve_engine_running_requests"]} >= {TINY, MINILM}
    assert {s.labels["model"] for s in idle["xinserve_kv_cache_usage_ratio"]} >= {TINY, MINILM}
    request = inference_pb2.GenerateRequest(
        model=TINY,
        prompt="keep going",
        sampling_params=sampling_pb2.SamplingParams(max_tokens=200, ignore_eos=True, temperature=0.0),
    )
    call = api.inference.GenerateStream(request)
    try:
        await call.read()  # the first tokens: the request is running in the engine
        busy = _scrape()
    finally:
        call.cancel()
    assert _value(busy["xinserve_engine_running_requests"], "xinserve_engine_running_requests", model=TINY) >= 1
    (kv,) = [s.value for s in busy["xinserve_kv_cache_usage_ratio"] if s.labels["model"] == TINY]
    assert 0.0 <= kv <= 1.0
