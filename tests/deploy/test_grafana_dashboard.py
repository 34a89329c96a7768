"""The Grafana dashboard: every PromQL expression reads metrics the live server's /metrics
exposes (after one generation, so labelled histograms have samples)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import TINY
from tests.deploy.promql_names import metric_names
from xinserve.v1 import inference_pb2, sampling_pb2, server_pb2

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy/grafana/xinserve-dashboard.json"


def _expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]


def test_promql_names_parser():
    expr = 'histogram_quantile(0.99, sum by (le, method) (rate(a_bucket{x="by (y)"}[5m]))) / b_total{n=~"$ns"}'
    assert metric_names(expr) == {"a_bucket", "b_total"}
    assert metric_names("sum(vllm:num_requests_waiting)") == {"vllm:num_requests_waiting"}
    with pytest.raises(ValueError, match="no metric"):
        metric_names("sum(rate())")


def test_dashboard_covers_what_operators_ask_for():
    names = set().union(*(metric_names(e) for e in _expressions()))
    for wanted in (
        "xinserve_requests_total",
        "xinserve_request_duration_seconds_bucket",
        "xinserve_time_to_first_token_seconds_bucket",
        "xinserve_generation_tokens_total",
        "xinserve_queue_length",
        "xinserve_in_flight_requests",
        "xinserve_kv_cache_usage_ratio",
        "xinserve_device_utilization_ratio",
        "xinserve_device_memory_used_bytes",
        "xinserve_device_temperature_celsius",
        "xinserve_audit_commit_duration_seconds_bucket",
    ):
        assert wanted in names


@pytest.mark.asyncio(loop_scope="session")
async def test_every_dashboard_metric_is_exposed_by_the_live_server(api):
    await api.server.GetServerInfo(server_pb2.GetServerInfoRequest())  # device inventory read
    await api.inference.Generate(
        inference_pb2.GenerateRequest(
            model=TINY, prompt="dashboard", sampling_params=sampling_pb2.SamplingParams(max_tokens=3, temperature=0.0)
        )
    )
    text = generate_latest(REGISTRY).decode()
    families = list(text_string_to_metric_families(text))
    # A sample name, or a gauge family declared without samples (the CPU reports no temperature
    # or power: xinserve_device_power_watts is exposed with HELP/TYPE and no sample there).
    exposed = {s.name for family in families for s in family.samples} | {f.name for f in families if f.type == "gauge"}
    missing = {name for expr in _expressions() for name in metric_names(expr)} - exposed
    assert not missing, f"dashboard reads metrics the server does not expose: {sorted(missing)}"
