"""Running helm from tests: where it is, and rendering the chart to objects."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import yaml

from tests.deploy import crd_schemas

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy/helm/xinserve"
KUBE_VERSION = "1.31.0"


def helm_binary() -> str | None:
    """helm on PATH, else where ``go install`` (scripts/bootstrap) puts it."""
    gopath = os.environ.get("GOPATH") or str(Path.home() / "go")
    return shutil.which("helm") or shutil.which("helm", path=str(Path(gopath) / "bin"))


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    binary = helm_binary()
    assert binary, "helm is not installed"
    return subprocess.run([binary, *args], capture_output=True, text=True, check=False, timeout=300)


def render(*sets: str, values: list[Path] | None = None) -> list[dict]:
    """``helm template`` with ``--set`` pairs; the rendered objects (raises on a render error)."""
    args = ["template", "rel", str(CHART), "--kube-version", KUBE_VERSION, "--namespace", "ai"]
    for s in sets:
        args += ["--set", s]
    for v in values or []:
        args += ["--values", str(v)]
    proc = helm(*args)
    if proc.returncode != 0:
        raise RenderError(proc.stderr.strip())
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


class RenderError(Exception):
    pass


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def validate_all(objects: list[dict]) -> None:
    """Every object valid against Kubernetes KUBE_VERSION (kubernetes-validate, strict) or, for a
    custom resource, its vendored CRD schema (tests/deploy/crds), its pod templates as core/v1 Pods."""
    for obj in objects:
        if obj["kind"] in crd_schemas.FILES:
            assert crd_schemas.errors(obj) == [], (obj["kind"], crd_schemas.errors(obj))
            for path in crd_schemas.crd(obj["kind"])["pod_templates"]:
                template = obj
                for part in path.split("."):
                    template = template[part]
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": template["spec"]}
                kubernetes_validate.validate(pod, KUBE_VERSION, strict=True)
            continue
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def container_of(objects: list[dict]) -> dict:
    """The Deployment's xinserve container."""
    (deployment,) = by_kind(objects, "Deployment")
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "xinserve")


def config_of(objects: list[dict]) -> dict:
    """xinserve's configuration as the ConfigMap holds it."""
    (cm,) = [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-config")]
    return yaml.safe_load(cm["data"]["config.yaml"])


def skip_without_helm() -> None:
    """Skip the calling test module, with the reason, when helm is not installed."""
    if helm_binary() is None:
        import pytest

        pytest.skip(
            "helm is not installed here: scripts/bootstrap installs it (go install helm.sh/helm/v3/cmd/helm)",
            allow_module_level=True,
        )


POSTGRESQL = [
    "audit.backend=postgresql",
    "audit.postgresql.dsnSecretName=audit-db",
    "audit.serverKey.secretName=server-key",
    "audit.postgresql.archiveVolume.persistentVolumeClaim.claimName=audit-archive",
]
"""The documented path for replicas > 1: PostgreSQL (DSN from a Secret), the server key from a Secret."""
