"""The Helm chart: lint, render for every chip profile, every object valid against the
Kubernetes schemas (kubernetes-validate) or its CRD's schema (ServiceMonitor, ScaledObject,
LeaderWorkerSet), and what matters asserted: probes on the gRPC health
service, grace periods ordered, the chip's device-plugin resource, a config xinserve accepts."""

from __future__ import annotations

import copy
import json
import tomllib

import kubernetes_validate
import pytest
import yaml

from engine_backends.devices.registry import CHIPS
from engine_backends.platforms import PROFILES
from service.settings.config import Settings
from tests.deploy import crd_schemas
from tests.deploy.helm import (
    CHART,
    KUBE_VERSION,
    POSTGRESQL,
    RenderError,
    by_kind,
    config_of,
    container_of,
    helm,
    render,
    skip_without_helm,
    validate_all,
)

skip_without_helm()
REPO = CHART.parents[2]

PG = POSTGRESQL
MODELS = ["models[0].name=qwen", "models[0].path=/models/qwen"]
# Each chip's device-plugin resource, from the chip registry (test_chip_registry compares the
# registry with the chart's chipProfiles).
CHIP_RESOURCES = {chip.name: chip.k8s_resource for chip in CHIPS}
CUSTOM_KINDS = set(crd_schemas.FILES)
_validate_all = validate_all
_container = container_of
_config = config_of


def test_the_chart_offers_every_chip_xinserve_has_a_profile_and_an_image_for():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    images = set(tomllib.loads((REPO / "deploy" / "docker" / "images.toml").read_text()))
    chips = set(values["chipProfiles"])
    assert chips == set(PROFILES) == images == set(CHIP_RESOURCES)
    assert set(schema["properties"]["chip"]["enum"]) == chips
    device_enum = schema["properties"]["chipProfiles"]["additionalProperties"]["properties"]["device"]["enum"]
    assert set(device_enum) == chips
    assert all(values["chipProfiles"][c]["device"] == c for c in chips)


def test_helm_lint():
    proc = helm("lint", str(CHART), "--kube-version", KUBE_VERSION)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("chip", sorted(CHIP_RESOURCES))
def test_every_chip_profile_renders_valid_objects(chip):
    objects = render(f"chip={chip}", "devicesPerPod=2")
    _validate_all(objects)
    container = _container(objects)
    resource = CHIP_RESOURCES[chip]
    limits, requests = container["resources"]["limits"], container["resources"]["requests"]
    if resource:
        assert limits[resource] == 2 and requests[resource] == 2
    else:
        assert not any("/" in k for k in limits)
    config = _config(objects)
    assert config["engine"]["device"] == chip
    assert container["image"].endswith(f":0.1.0-{chip}")
    Settings.model_validate(config)  # the configuration xinserve itself accepts


def test_probes_use_grpc_health_on_the_served_port():
    objects = render()
    container = _container(objects)
    grpc_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "grpc")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"] == {"port": grpc_port, "service": ""}
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800  # model loading
    listen = _config(objects)["listen"]["plaintext"]
    assert f"0.0.0.0:{grpc_port}" in listen
    (service,) = [s for s in by_kind(objects, "Service") if s["metadata"]["name"] == "rel-xinserve"]
    assert service["spec"]["ports"][0]["targetPort"] == "grpc"


def test_under_tls_probes_exec_the_health_check_on_a_loopback_listener(tmp_path):
    objects = render("tls.secretName=xinserve-tls", "auth.tokenSecretName=xinserve-tokens", "auth.required=true")
    _validate_all(objects)
    container = _container(objects)
    config = _config(objects)
    assert config["listen"]["tls"] == ["0.0.0.0:50051"]
    assert config["listen"]["plaintext"] == ["127.0.0.1:50052"] and "allow_insecure_remote" not in config["listen"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["exec"]["command"] == ["python3", "-m", "service.healthcheck", "127.0.0.1:50052"]
    assert config["tls"] == {"cert_file": "/etc/xinserve/tls/tls.crt", "key_file": "/etc/xinserve/tls/tls.key"}
    # A Secret volume's files are made readable by the pod's fsGroup (kubelet adds 0440): the
    # chart says so to xinserve, which otherwise refuses a group-readable token file at start.
    assert config["auth"] == {
        "required": True,
        "token_file": "/etc/xinserve/tokens/tokens.txt",
        "allow_insecure_token_file_permissions": True,
    }
    # xinserve checks the mounted files exist: validate with the Secret mounts mapped to files here.
    mounted = yaml.safe_dump(config).replace("/etc/xinserve/", f"{tmp_path}/")
    for name in ("tls/tls.crt", "tls/tls.key", "tokens/tokens.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    Settings.model_validate(yaml.safe_load(mounted))


@pytest.mark.parametrize(("drain", "pre_stop", "margin"), [(30, 5, 15), (120, 10, 5)])
def test_grace_period_covers_pre_stop_then_drain_then_shutdown(drain, pre_stop, margin):
    objects = render(
        f"server.drainGraceSeconds={drain}",
        f"lifecycle.preStopSleepSeconds={pre_stop}",
        f"lifecycle.shutdownMarginSeconds={margin}",
    )
    (deployment,) = by_kind(objects, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == pre_stop
    assert _config(objects)["drain_grace_seconds"] == drain
    assert spec["terminationGracePeriodSeconds"] == pre_stop + drain + margin > pre_stop + drain


def test_non_root_read_only_root_filesystem_and_writable_mounts():
    objects = render()
    (deployment,) = by_kind(objects, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    container = spec["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert {"/var/lib/xinserve", "/tmp", "/dev/shm"} <= set(mounts)
    assert mounts["/models"]["readOnly"] is True


def test_sqlite_audit_on_a_pvc_postgresql_dsn_from_a_secret():
    objects = render()
    assert by_kind(objects, "PersistentVolumeClaim")
    objects = render(*PG, "replicaCount=3")
    _validate_all(objects)
    assert not by_kind(objects, "PersistentVolumeClaim")
    env = {e["name"]: e for e in _container(objects)["env"]}
    assert env["XINSERVE_AUDIT__DSN"]["valueFrom"]["secretKeyRef"] == {"name": "audit-db", "key": "dsn"}


def test_sqlite_audit_with_several_replicas_refused():
    with pytest.raises(RenderError, match=r"audit\.backend=sqlite keeps one pod's audit log"):
        render("replicaCount=2")


def test_values_schema_refuses_bad_values():
    with pytest.raises(RenderError, match="/chip"):
        render("chip=tpu")
    with pytest.raises(RenderError, match="retentionDays"):
        render("audit.retentionDays=30")


def test_services_headless_metrics_and_service_monitor():
    objects = render("serviceMonitor.enabled=true", "server.http=true")
    _validate_all(objects)
    services = {s["metadata"]["name"]: s for s in by_kind(objects, "Service")}
    assert services["rel-xinserve-headless"]["spec"]["clusterIP"] == "None"
    assert {p["name"] for p in services["rel-xinserve"]["spec"]["ports"]} == {"grpc", "http"}
    (monitor,) = by_kind(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    labels = services["rel-xinserve-metrics"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_network_policy():
    objects = render()
    (policy,) = by_kind(objects, "NetworkPolicy")
    ports = [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]
    assert ports == [50051, 9464]


def test_leaderworkerset_with_ray():
    objects = render(
        "mode=leaderworkerset",
        "chip=ascend",
        "devicesPerPod=8",
        "lws.size=2",
        *PG,
    )
    _validate_all(objects)
    assert not by_kind(objects, "Deployment")
    (lws,) = by_kind(objects, "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    assert "ray start --head --port=6379" in leader["args"][0] and "exec xinserve serve" in leader["args"][0]
    assert "--address=$(LWS_LEADER_ADDRESS):6379" in worker["args"][0]
    assert leader["resources"]["limits"]["huawei.com/Ascend910"] == 8
    assert worker["resources"]["limits"]["huawei.com/Ascend910"] == 8
    engine = _config(objects)["engine"]
    assert engine == {
        "device": "ascend",
        "distributed_executor_backend": "ray",
        "tensor_parallel_size": 8,  # inside a host first
        "pipeline_parallel_size": 2,  # then across hosts
    }
    for pod in (template["leaderTemplate"], template["workerTemplate"]):
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod["spec"]}, KUBE_VERSION, True
        )


def test_grafana_dashboard_shipped_in_the_chart_is_deploys_copy():
    objects = render()
    (cm,) = [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]
    deploy_copy = (CHART.parents[1] / "grafana/xinserve-dashboard.json").read_text()
    assert cm["data"]["xinserve.json"] == deploy_copy.rstrip("\n")


def _custom_objects() -> dict[str, dict]:
    db = PG
    return {
        "ServiceMonitor": by_kind(render("serviceMonitor.enabled=true"), "ServiceMonitor")[0],
        "ScaledObject": by_kind(
            render(*db, *MODELS, "autoscaling.enabled=true", "autoscaling.kind=keda"), "ScaledObject"
        )[0],
        "LeaderWorkerSet": by_kind(render(*db, "mode=leaderworkerset", "lws.size=2"), "LeaderWorkerSet")[0],
    }


def test_custom_resources_valid_and_their_crd_schemas_catch_mistakes():
    objects = _custom_objects()
    for kind, obj in objects.items():
        assert crd_schemas.errors(obj) == [], kind
    monitor, scaled, lws = (copy.deepcopy(objects[k]) for k in ("ServiceMonitor", "ScaledObject", "LeaderWorkerSet"))
    monitor["spec"]["endpoints"][0]["scheme"] = "grpc"  # the CRD allows http/https/HTTP/HTTPS
    assert any(e.startswith("spec.endpoints.0.scheme:") for e in crd_schemas.errors(monitor))
    scaled["spec"]["minReplicaCount"] = "one"
    assert any(e.startswith("spec.minReplicaCount:") for e in crd_schemas.errors(scaled))
    scaled = copy.deepcopy(objects["ScaledObject"])
    scaled["spec"]["triggers"][0]["metadatas"] = scaled["spec"]["triggers"][0].pop("metadata")
    assert any("metadatas" in e for e in crd_schemas.errors(scaled))
    lws["spec"]["leaderWorkerTemplate"]["size"] = "2"
    assert any(e.startswith("spec.leaderWorkerTemplate.size:") for e in crd_schemas.errors(lws))
    lws = copy.deepcopy(objects["LeaderWorkerSet"])
    lws["apiVersion"] = "leaderworkerset.x-k8s.io/v1alpha1"
    assert crd_schemas.errors(lws)[0].startswith("apiVersion:")


def test_vendored_crds_name_their_source_and_licence():
    for kind in CUSTOM_KINDS:
        record = crd_schemas.crd(kind)
        assert record["kind"] == kind and record["licence"] == "Apache-2.0"
        assert record["source"].startswith("github.com/") and " v" in record["source"]
