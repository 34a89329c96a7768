"""The engine-argument plan: profile < large-model rule < model < configuration < the model's own
engine section, with reasons; the server starts each model with it."""

import pytest

from engine_backends.engine_args_plan import plan_engine_args
from engine_backends.errors import PlatformError
from engine_backends.platforms import PROFILES


def _plan(profile, configured, options=None, model_dir=None, model_configured=None):
    return {a.name: a for a in plan_engine_args(PROFILES[profile], configured, options, model_dir, model_configured)}


def test_configuration_overrides_the_profile():
    plan = _plan("ascend", {"gpu_memory_utilization": 0.8})
    assert plan["gpu_memory_utilization"].value == 0.8 and plan["gpu_memory_utilization"].source == "configuration"
    assert plan["dtype"].value == "bfloat16" and "bf16" in plan["dtype"].why
    assert plan["enforce_eager"].value is False


def test_large_model_gets_chunked_prefill_512(tmp_path):
    (tmp_path / "model-00001.safetensors").open("wb").truncate(70 * 10**9)  # sparse: ~35 B parameters
    plan = _plan("cuda", {}, model_dir=tmp_path)
    assert plan["enable_chunked_prefill"].value is True and plan["max_num_batched_tokens"].value == 512
    assert plan["max_num_batched_tokens"].why.startswith("~35 B parameters")
    small = tmp_path / "small"
    small.mkdir()
    (small / "model.safetensors").open("wb").truncate(10**9)
    assert "max_num_batched_tokens" not in _plan("cuda", {}, model_dir=small)


def test_model_options_sit_between_profile_and_configuration():
    plan = _plan("cpu", {"max_num_seqs": 4}, {"max_model_len": 2048, "max_num_seqs": 8})
    assert (plan["max_model_len"].value, plan["max_model_len"].source) == (2048, "model")
    assert (plan["max_num_seqs"].value, plan["max_num_seqs"].source) == (4, "configuration")


def test_quantization_without_kernel_refused_in_the_plan():
    with pytest.raises(PlatformError, match="quantization 'awq' has no kernel on ascend"):
        _plan("ascend", {"quantization": "awq"})


def test_a_models_own_engine_section_overrides_the_configuration():
    plan = _plan("cpu", {"max_num_seqs": 4}, None, None, {"max_num_seqs": 2})
    assert (plan["max_num_seqs"].value, plan["max_num_seqs"].source) == (2, "model configuration")
    assert plan["enforce_eager"].source == "cpu profile"


def test_the_server_starts_models_with_the_plan(tmp_path):
    import asyncio

    from service.lifecycle.server import model_entries
    from service.settings.config import Settings

    big = tmp_path / "big"
    big.mkdir()
    (big / "model-00001.safetensors").open("wb").truncate(70 * 10**9)  # sparse: ~35 B parameters
    settings = Settings(
        data_dir=tmp_path / "data",
        engine={"device": "cpu", "max_num_seqs": 4},
        models=[{"name": "big", "path": str(big), "engine": {"max_model_len": 1024}}],
    )
    entries, _ = asyncio.run(model_entries(settings, PROFILES["cpu"]))
    options = entries[0].engine._options
    expected = {
        a.name: a.value
        for a in plan_engine_args(PROFILES["cpu"], {"max_num_seqs": 4}, None, big, {"max_model_len": 1024})
    }
    assert options == expected
    assert options["enable_chunked_prefill"] is True and options["max_num_batched_tokens"] == 512
    assert options["max_model_len"] == 1024 and options["max_num_seqs"] == 4 and options["enforce_eager"] is True


def test_kunlun_keeps_chunked_prefill_off_for_large_models(tmp_path):
    (tmp_path / "model-00001.safetensors").open("wb").truncate(70 * 10**9)  # sparse: ~35 B parameters
    plan = _plan("kunlun", {}, model_dir=tmp_path)
    assert (plan["enable_chunked_prefill"].value, plan["enable_chunked_prefill"].source) == (False, "kunlun profile")
    assert (plan["max_num_batched_tokens"].value, plan["max_num_batched_tokens"].source) == (32768, "kunlun profile")
    assert plan["block_size"].value == 128 and plan["dtype"].value == "float16"


def test_a_chip_model_profile_is_named_in_the_plan():
    plan = _plan("ascend-310p", {})
    assert (plan["dtype"].value, plan["dtype"].source) == ("float16", "ascend-310p profile")
