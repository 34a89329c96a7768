"""Running helm from tests: where it is, and rendering the chart to objects."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

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
