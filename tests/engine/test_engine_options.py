"""Engine options per model (``models[].engine``), and load failures that name the option and
the model's limit instead of "failed to load (ValidationError)"."""

from __future__ import annotations

import pytest

from engine_backends.builtin_models import minilm_dir
from engine_backends.platforms import resolve_device
from engine_backends.vllm_compat import AsyncEngineArgs, explain_engine_error
from service.lifecycle.server import model_entries
from service.settings.config import ConfigError, load_settings
from tests.conftest import _data_dir


def test_too_long_max_model_len_names_the_option_and_the_limit():
    options = {"max_model_len": 1024, "kv_cache_memory_bytes": 256 << 20}
    path = minilm_dir(_data_dir())
    with pytest.raises(Exception) as caught:  # what vLLM raises: pydantic's ValidationError
        AsyncEngineArgs(model=str(path), runner="pooling", **options).create_engine_config()
    reason = explain_engine_error(caught.value, options)
    assert reason is not None, str(caught.value)[:300]
    assert "max_model_len=1024" in reason and "limit of 256 tokens" in reason
    assert str(path) not in reason


def test_an_unrelated_failure_is_not_blamed_on_an_option():
    assert explain_engine_error(RuntimeError("CUDA driver missing"), {"max_model_len": 512}) is None
    assert "dtype='float64'" in (
        explain_engine_error(ValueError("dtype float64 unsupported"), {"dtype": "float64"}) or ""
    )


@pytest.mark.asyncio(loop_scope="session")
async def test_a_models_engine_section_overrides_the_global_one(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    settings = load_settings(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "engine": {"max_model_len": 1024, "max_num_seqs": 8},
            "models": [
                {"name": "a", "path": str(tmp_path / "a"), "kind": "embed", "engine": {"max_model_len": 256}},
                {"name": "b", "path": str(tmp_path / "b")},
            ],
        }
    )
    entries, _store = await model_entries(settings, resolve_device("cpu", None))
    options = {e.name: e.engine._options for e in entries}  # type: ignore[attr-defined]
    assert options["a"]["max_model_len"] == 256 and options["a"]["max_num_seqs"] == 8
    assert options["b"]["max_model_len"] == 1024


def test_unknown_per_model_engine_option_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    with pytest.raises(ConfigError, match=r"models\.0\.engine\.max_model_length"):
        load_settings(
            overrides={"models": [{"name": "a", "path": str(tmp_path / "a"), "engine": {"max_model_length": 1}}]}
        )
