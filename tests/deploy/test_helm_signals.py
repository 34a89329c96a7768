"""The chart's signals and routing: the PrometheusRule's alerts read metrics the server
exports, autoscaling reads the engine's own signals with a label every scrape keeps, the
InferencePool selects the xinserve pods on the OpenAI HTTP port, and the metrics a live
xinserve exports satisfy the Gateway API Inference Extension's model-server protocol."""

from __future__ import annotations

import copy

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

# Importing these registers the metrics the alerts read on the default registry.
import audit.metrics  # noqa: F401
import service.core.metrics
import service.runtime.device_monitor
import service.runtime.model_metrics  # noqa: F401
from tests.conftest import TINY
from tests.deploy import crd_schemas
from tests.deploy.helm import POSTGRESQL, RenderError, by_kind, render, skip_without_helm, validate_all
from tests.deploy.promql_names import metric_names
from xinserve.v1 import inference_pb2, sampling_pb2

skip_without_helm()

PG = POSTGRESQL
MODELS = ["models[0].name=qwen2.5-7b", "models[0].path=/models/qwen"]
# Gateway API Inference Extension v1.5.0, docs/proposals/003-model-server-protocol and the EPP's
# flag defaults (pkg/epp/server/options.go): the vLLM names of the metrics the picker reads.
PROTOCOL_GAUGES = {
    "TotalQueuedRequests": "vllm:num_requests_waiting",
    "TotalRunningRequests": "vllm:num_requests_running",
    "KVCacheUtilization": "vllm:kv_cache_usage_perc",
}


def _exposed(text: str) -> set[str]:
    families = list(text_string_to_metric_families(text))
    return {s.name for f in families for s in f.samples} | {f.name for f in families if f.type == "gauge"}


def test_prometheus_rule_alerts_on_exported_metrics():
    objects = render("prometheusRule.enabled=true", "prometheusRule.labels.release=kube-prometheus")
    validate_all(objects)
    (rule,) = by_kind(objects, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    rules = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert set(rules) == {
        "XinserveModelNotReady",
        "XinserveEngineDied",
        "XinserveDeviceUnhealthy",
        "XinserveAuditAppendFailures",
        "XinserveAuditUnhealthy",
        "XinserveAuditCommitSlow",
        "XinserveAuditDiskFilling",
    }
    exposed = _exposed(generate_latest(REGISTRY).decode())
    for name, r in rules.items():
        missing = metric_names(r["expr"]) - exposed
        assert not missing, f"{name} reads metrics the server does not export: {missing}"
    assert rules["XinserveAuditDiskFilling"]["expr"].endswith("> 0.85")
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["for"] = 30  # the CRD wants a duration string
    assert crd_schemas.errors(broken)


def test_hpa_on_the_engine_waiting_queue():
    objects = render(*PG, "autoscaling.enabled=true")
    validate_all(objects)
    (hpa,) = by_kind(objects, "HorizontalPodAutoscaler")
    metric = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]
    assert metric == "xinserve_engine_waiting_requests"
    assert metric in _exposed(generate_latest(REGISTRY).decode())


def test_keda_on_vllm_queue_and_kv_cache_by_model_name():
    objects = render(*PG, *MODELS, "autoscaling.enabled=true", "autoscaling.kind=keda")
    validate_all(objects)
    (scaled,) = by_kind(objects, "ScaledObject")
    queries = {t["name"]: t["metadata"] for t in scaled["spec"]["triggers"]}
    # model_name is vLLM's own label: present with a ServiceMonitor, pod annotations or any scrape.
    assert queries["waiting"]["query"] == 'sum(vllm:num_requests_waiting{model_name=~"qwen2\\\\.5-7b"})'
    assert queries["kv-cache"]["query"] == 'max(vllm:kv_cache_usage_perc{model_name=~"qwen2\\\\.5-7b"})'
    assert queries["kv-cache"]["threshold"] == "0.8"
    with pytest.raises(RenderError, match=r"list models, or set autoscaling\.keda\.query"):
        render(*PG, "autoscaling.enabled=true", "autoscaling.kind=keda")


def test_inference_pool_selects_the_xinserve_pods_on_the_http_port():
    objects = render(*PG, "replicaCount=3", "server.http=true", "inferencePool.enabled=true")
    validate_all(objects)
    (pool,) = by_kind(objects, "InferencePool")
    deployments = {d["metadata"]["name"]: d for d in by_kind(objects, "Deployment")}
    xinserve, epp = deployments["rel-xinserve"], deployments["rel-xinserve-epp"]
    pod_labels = xinserve["spec"]["template"]["metadata"]["labels"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert not pool["spec"]["selector"]["matchLabels"].items() <= epp["spec"]["template"]["metadata"]["labels"].items()
    http = next(p for p in xinserve["spec"]["template"]["spec"]["containers"][0]["ports"] if p["name"] == "http")
    assert pool["spec"]["targetPorts"] == [{"number": http["containerPort"]}] and pool["spec"]["appProtocol"] == "http"
    services = {s["metadata"]["name"]: s for s in by_kind(objects, "Service")}
    ref = pool["spec"]["endpointPickerRef"]
    assert ref["name"] in services and ref["port"]["number"] in [
        p["port"] for p in services[ref["name"]]["spec"]["ports"]
    ]
    args = epp["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--pool-name") + 1] == pool["metadata"]["name"]
    assert args[args.index("--model-server-metrics-port") + 1] == "9464"
    (policy,) = by_kind(objects, "NetworkPolicy")
    allowed = [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]
    assert 8000 in allowed and allowed.count(9464) == 2  # Prometheus and the picker
    bad = copy.deepcopy(pool)
    bad["spec"]["appProtocol"] = "grpc"  # the CRD allows http and kubernetes.io/h2c
    assert any(e.startswith("spec.appProtocol:") for e in crd_schemas.errors(bad))
    with pytest.raises(RenderError, match=r"set server\.http=true"):
        render(*PG, "inferencePool.enabled=true")


@pytest.mark.asyncio(loop_scope="session")
async def test_live_server_exports_the_model_server_protocol_metrics(api):
    await api.inference.Generate(
        inference_pb2.GenerateRequest(
            model=TINY, prompt="pool", sampling_params=sampling_pb2.SamplingParams(max_tokens=2, temperature=0.0)
        )
    )
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(REGISTRY).decode())}
    for role, name in PROTOCOL_GAUGES.items():
        family = families.get(name)
        assert family is not None, f"{role}: {name} is not exported"
        assert family.type == "gauge", (name, family.type)
        samples = [s for s in family.samples if s.labels.get("model_name") == TINY]
        assert samples, f"{name} has no sample for model_name={TINY}"
    kv = [s.value for s in families["vllm:kv_cache_usage_perc"].samples]
    assert all(0.0 <= v <= 1.0 for v in kv)  # a fraction, as the picker's flag documents
