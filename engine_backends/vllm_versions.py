"""Which vLLM each chip's platform plugin supports, and the start-time check against it.

Each vendor plugin is built against one vLLM release line and pins it; running another vLLM
under the plugin fails late and obscurely (missing symbols, changed signatures). The supported
range per device kind is its chip registry entry's (``engine_backends.devices.registry``, which
names the sources); ``docs/deploy.md`` shows it and each per-chip Dockerfile's base image must
carry a vLLM inside it (tested).
"""

from __future__ import annotations

import importlib.metadata

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from engine_backends.devices.registry import KIND_CHIPS, VllmSupport
from engine_backends.errors import PlatformError

__all__ = [
    "SUPPORTED_VLLM",
    "VllmSupport",
    "check_vllm_version",
    "installed_version",
    "plugin_vllm_specifier",
    "supported_range",
]

SUPPORTED_VLLM: dict[str, VllmSupport] = {kind: chip.vllm for kind, chip in KIND_CHIPS.items()}


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def plugin_vllm_specifier(plugin: str) -> SpecifierSet | None:
    """The plugin distribution's own requirement on vllm (``Requires-Dist: vllm…``), if any."""
    try:
        requires = importlib.metadata.requires(plugin) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name.lower() == "vllm" and req.marker is None and str(req.specifier):
            return req.specifier
    return None


def supported_range(device: str) -> tuple[str, SpecifierSet | None]:
    """(vLLM distribution, supported specifier) for ``device``; the specifier may come from
    the installed plugin's own pin, or be None when neither the table nor a plugin says."""
    support = SUPPORTED_VLLM[device]
    if support.specifier is not None:
        return support.distribution, support.specifier
    return support.distribution, plugin_vllm_specifier(support.plugin) if support.plugin else None


def check_vllm_version(device: str, version: str | None = None) -> str:
    """Refuse a vLLM outside ``device``'s supported range; return the version checked.

    ``version`` defaults to the installed version of the device's vLLM distribution. Local
    version labels (``0.32.0+cpu``) are ignored for the comparison.

    Raises:
        PlatformError: vLLM is not installed, its version is not PEP 440, or it is outside
            the range; the message names the installed version, the range and the device.
    """
    distribution, specifier = supported_range(device)
    if version is None:
        version = installed_version(distribution)
    if version is None:
        raise PlatformError(f"device {device!r} needs {distribution}, which is not installed")
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise PlatformError(f"{distribution} reports the version {version!r}, which is not PEP 440") from None
    if specifier is None:
        return version
    if not specifier.contains(Version(parsed.public), prereleases=True):
        raise PlatformError(
            f"{distribution} {version} is not supported on {device}: xinserve supports {distribution}{specifier} "
            "there (see docs/deploy.md, 'Supported vLLM per chip')"
        )
    return version
