"""Per-chip platform profiles: which vLLM platform plugin serves a device kind, which
variable selects visible devices, and the engine arguments recommended there.

The profiles are those of the chip registry (``engine_backends.devices.registry.CHIPS``, where
each default names its source). ``resolve_device`` fails at start with the package to install
when the plugin for the requested device is missing.

A profile is per chip and, where the vendor's guidance differs, per chip model: ``ascend-310p``
(Atlas 300I DUO) is the ``ascend`` device with its own engine defaults and image.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable

from engine_backends.devices import Device, check_visible_devices, read_inventory
from engine_backends.devices.registry import CHIPS, PlatformProfile
from engine_backends.devices.visible import VisibleDevicesError
from engine_backends.errors import PlatformError
from engine_backends.vllm_versions import check_vllm_version

__all__ = ["DEVICE_CHOICES", "PROFILES", "PlatformProfile", "check_quantization", "resolve_device"]

PROFILES: dict[str, PlatformProfile] = {chip.name: chip.profile for chip in CHIPS}

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
