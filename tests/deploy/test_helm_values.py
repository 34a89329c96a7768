"""The chart's extension points and the shipped values files (Ascend, Kunlun, production):
each renders to objects valid against Kubernetes 1.31, puts what it extends where the pod
reads it, and yields a configuration the server's own Settings model accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from service.settings.config import Settings
from tests.deploy.helm import (
    CHART,
    POSTGRESQL,
    by_kind,
    config_of,
    container_of,
    render,
    skip_without_helm,
    validate_all,
)

skip_without_helm()

EXAMPLES = CHART / "examples"
PG = POSTGRESQL


def _validate_config(config: dict, tmp_path: Path) -> Settings:
    """Settings of ``config`` with the files the pod mounts (/etc/xinserve/...) made here."""
    text = yaml.safe_dump(config).replace("/etc/xinserve/", f"{tmp_path}/").replace("/models/", f"{tmp_path}/models/")
    mapped = yaml.safe_load(text)
    if mapped["audit"].get("store") == "postgresql":  # XINSERVE_AUDIT__DSN, from the DSN Secret
        mapped["audit"]["dsn"] = "postgresql://xinserve@audit-db/audit"
    for model in mapped.get("models", []):
        Path(model["path"]).mkdir(parents=True, exist_ok=True)
    for section, key in (("tls", "cert_file"), ("tls", "key_file"), ("tls", "client_ca_file"), ("auth", "token_file")):
        if path := mapped.get(section, {}).get(key):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text("")
    return Settings.model_validate(mapped)


def test_extension_points_reach_the_pod_and_the_service():
    objects = render(
        "extraEnv[0].name=SITE",
        "extraEnv[0].value=bank-a",
        "extraEnvFrom[0].configMapRef.name=site-env",
        "extraVolumes[0].name=tool",
        "extraVolumes[0].hostPath.path=/usr/local/bin/cnmon",
        "extraVolumeMounts[0].name=tool",
        "extraVolumeMounts[0].mountPath=/usr/local/bin/cnmon",
        "podSecurityContext.supplementalGroups={44,1000}",
        "runtimeClassName=kata",
        "priorityClassName=inference-critical",
        "schedulerName=volcano",
        "nodeSelector.pool=npu",
        "tolerations[0].key=npu",
        "tolerations[0].operator=Exists",
        "topologySpreadConstraints[0].maxSkew=1",
        "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
        "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
        "podAnnotations.team=ai",
        "service.annotations.lb/internal=yes",
    )
    validate_all(objects)
    (deployment,) = by_kind(objects, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "kata" and spec["priorityClassName"] == "inference-critical"
    assert spec["schedulerName"] == "volcano" and spec["nodeSelector"] == {"pool": "npu"}
    assert spec["securityContext"]["supplementalGroups"] == [44, 1000]
    assert spec["tolerations"] == [{"key": "npu", "operator": "Exists"}]
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    assert {"name": "tool", "hostPath": {"path": "/usr/local/bin/cnmon"}} in spec["volumes"]
    container = container_of(objects)
    assert {"name": "SITE", "value": "bank-a"} in container["env"]
    assert container["envFrom"] == [{"configMapRef": {"name": "site-env"}}]
    assert {"name": "tool", "mountPath": "/usr/local/bin/cnmon"} in container["volumeMounts"]
    assert deployment["spec"]["template"]["metadata"]["annotations"]["team"] == "ai"
    (service,) = [s for s in by_kind(objects, "Service") if s["metadata"]["name"] == "rel-xinserve"]
    assert service["metadata"]["annotations"] == {"lb/internal": "yes"}


def test_lws_workers_get_the_same_extensions():
    objects = render(
        *PG, "mode=leaderworkerset", "extraEnv[0].name=A", "extraEnv[0].value=on", "extraVolumes[0].name=tool",
        "extraVolumes[0].hostPath.path=/usr/local/bin/npu-smi", "extraVolumeMounts[0].name=tool",
        "extraVolumeMounts[0].mountPath=/usr/local/bin/npu-smi",
    )  # fmt: skip
    validate_all(objects)
    (lws,) = by_kind(objects, "LeaderWorkerSet")
    for role in ("leaderTemplate", "workerTemplate"):
        spec = lws["spec"]["leaderWorkerTemplate"][role]["spec"]
        assert {"name": "A", "value": "on"} in spec["containers"][0]["env"], role
        assert any(m["name"] == "tool" for m in spec["containers"][0]["volumeMounts"]), role
        assert any(v["name"] == "tool" for v in spec["volumes"]), role


def test_config_block_merges_over_the_chart_and_the_server_accepts_it(tmp_path):
    objects = render(
        "config.admission.max_in_flight=8",
        "config.admission.max_queue=16",
        "config.limits.max_n=4",
        "config.auth.roles.reader.methods={xinserve.v1.InferenceService/Generate}",
        "config.auth.anonymous_roles={reader}",
        "config.auth.mtls_default_roles={reader}",
        "config.auth.mtls_roles[0].subject=CN=bank-app",
        "config.auth.mtls_roles[0].roles={reader}",
        "config.audit.failure_policy=log_and_continue",
        "config.devices.refresh_seconds=30",
        "config.engine.max_num_seqs=64",
        "engine.gpuMemoryUtilization=0.8",
    )
    config = config_of(objects)
    assert config["admission"] == {"max_in_flight": 8, "max_queue": 16}
    assert config["audit"]["failure_policy"] == "log_and_continue"
    assert config["audit"]["retention_days"] == 180  # the chart's keys stay beside the merged ones
    assert config["engine"] == {"device": "cpu", "max_num_seqs": 64, "gpu_memory_utilization": 0.8}
    settings = _validate_config(config, tmp_path)
    assert settings.admission.max_in_flight == 8 and settings.limits.max_n == 4
    assert settings.auth.mtls_roles[0].subject == "CN=bank-app"
    assert settings.devices.refresh_seconds == 30
    assert settings.engine.gpu_memory_utilization == 0.8


def test_gpu_memory_utilization_set_as_helm_keeps_it():
    # `--set x=0.8`: helm keeps a float as a string; the schema accepts it, the config is a number.
    assert config_of(render("engine.gpuMemoryUtilization=0.8"))["engine"]["gpu_memory_utilization"] == 0.8


@pytest.mark.parametrize("name", ["ascend", "kunlun", "production"])
def test_shipped_values_files_render_valid_and_the_server_accepts_their_config(name, tmp_path):
    objects = render(values=[EXAMPLES / f"{name}-values.yaml"])
    validate_all(objects)
    settings = _validate_config(config_of(objects), tmp_path)
    container = container_of(objects)
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    (deployment,) = by_kind(objects, "Deployment")
    strategy = deployment["spec"]["strategy"]
    if name == "ascend":
        assert settings.engine.device == "ascend" and container["resources"]["limits"]["huawei.com/Ascend910"] == 8
        assert {"/usr/local/bin/npu-smi", "/usr/local/dcmi", "/usr/local/Ascend/driver/lib64"} <= mounts
        assert deployment["spec"]["template"]["spec"]["securityContext"]["supplementalGroups"] == [1000]
        assert strategy == {"type": "Recreate"}
    elif name == "kunlun":
        assert settings.engine.device == "kunlun" and container["resources"]["limits"]["kunlunxin.com/xpu"] == 8
        assert "/usr/local/bin/xpu-smi" in mounts and strategy == {"type": "Recreate"}
    else:
        # TLS in the cluster, client certificates, tokens required, PostgreSQL, key from a Secret.
        assert settings.listen.tls == ["0.0.0.0:50051"] and settings.listen.plaintext == ["127.0.0.1:50052"]
        assert settings.listen.https == ["0.0.0.0:8000"] and not settings.listen.http
        assert settings.tls.client_ca_file is not None and settings.auth.required
        assert str(settings.audit.store) == "postgresql"  # the DSN: XINSERVE_AUDIT__DSN from the Secret
        assert settings.audit.require_anchor and settings.audit.anchor_posture == "syslog"
        assert by_kind(objects, "PrometheusRule") and by_kind(objects, "ServiceMonitor")
        assert by_kind(objects, "PodDisruptionBudget")
        reload = deployment["metadata"]["annotations"]["secret.reloader.stakater.com/reload"]
        assert set(reload.split(",")) == {
            "xinserve-tls", "xinserve-client-ca", "xinserve-tokens", "xinserve-server-key",
        }  # fmt: skip
        assert strategy["type"] == "RollingUpdate"
