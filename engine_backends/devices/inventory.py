"""Device inventory per device kind: which tool reads it, and one call that never raises.

=======  =================================================  ==========================
kind     tool                                               parser
=======  =================================================  ==========================
cpu      /proc/cpuinfo, /proc/meminfo, /proc/stat           ``cpu``
cuda     NVML (nvidia-ml-py), else ``nvidia-smi -q -x``     ``nvidia_smi``
ascend   ``npu-smi info``                                   ``npu_smi``
kunlun   ``xpu-smi`` or ``xpu_smi`` (Kunlunxin's)           ``xpu_smi.parse_kunlun``
xpu      ``xpu-smi`` (Intel's)                              ``xpu_smi.parse_intel``
mlu      ``cnmon``                                          ``cnmon``
musa     ``mthreads-gmi``                                   ``mthreads_gmi``
dcu      ``hy-smi --json``, else plain ``hy-smi``;           ``hy_smi``
         the driver from ``hy-smi --showdriverversion``
metax    ``mx-smi``                                         ``mx_smi``
=======  =================================================  ==========================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from engine_backends.devices import cnmon, cpu, hy_smi, mthreads_gmi, mx_smi, npu_smi, nvidia_smi, xpu_smi
from engine_backends.devices.model import Device, DeviceParseError, DeviceToolError, failed_device
from engine_backends.devices.tool_runner import find_tool, run_tool

DEFAULT_TIMEOUT_SECONDS = 10.0

# kind -> (argv, parser) for the kinds read through one command-line tool.
TOOLS: dict[str, tuple[Sequence[str], Callable[[str], list[Device]]]] = {
    "ascend": (npu_smi.ARGV, npu_smi.parse),
    "kunlun": (xpu_smi.ARGV, xpu_smi.parse_kunlun),
    "xpu": (xpu_smi.ARGV, xpu_smi.parse_intel),
    "mlu": (cnmon.ARGV, cnmon.parse),
    "musa": (mthreads_gmi.ARGV, mthreads_gmi.parse),
    "dcu": (hy_smi.ARGV, hy_smi.parse),
    "metax": (mx_smi.ARGV, mx_smi.parse),
}
KINDS = ("cpu", "cuda", *TOOLS)


def _read_cuda(timeout: float) -> list[Device]:
    try:
        return nvidia_smi.read_nvml()
    except DeviceToolError as nvml_error:
        try:
            return nvidia_smi.parse(run_tool(nvidia_smi.ARGV, timeout))
        except DeviceToolError as exc:
            raise DeviceToolError(f"{nvml_error}; {exc}") from None


def _read_dcu(timeout: float) -> list[Device]:
    argv, parser = TOOLS["dcu"]
    try:
        devices = parser(run_tool(argv, timeout))
    except (DeviceToolError, DeviceParseError) as json_error:
        if find_tool(hy_smi.TOOL) is None:
            raise
        try:
            devices = hy_smi.parse_table(run_tool(hy_smi.TABLE_ARGV, timeout))
        except DeviceParseError as exc:
            raise DeviceParseError(hy_smi.TOOL, f"{json_error}; plain table: {exc.reason}") from None
        except DeviceToolError as exc:
            raise DeviceToolError(f"{json_error}; {exc}") from None
    return _with_dcu_driver(devices, timeout)


def _with_dcu_driver(devices: list[Device], timeout: float) -> list[Device]:
    if all(d.driver_version for d in devices):
        return devices
    try:
        driver = hy_smi.parse_driver_version(run_tool(hy_smi.DRIVER_ARGV, timeout))
    except DeviceToolError:
        return devices
    return [d if d.driver_version else dataclasses.replace(d, driver_version=driver) for d in devices]


def read_devices(kind: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> list[Device]:
    """The devices of ``kind`` as its tool reports them now.

    Raises:
        ValueError: ``kind`` is not one of ``KINDS``.
        DeviceToolError: the tool is missing, failed or timed out.
        DeviceParseError: the tool's output is not in the format its parser knows.
        OSError: ``/proc`` cannot be read (cpu).
    """
    if kind == "cpu":
        return [cpu.read()]
    if kind == "cuda":
        return _read_cuda(timeout)
    if kind == "dcu":
        return _read_dcu(timeout)
    if kind not in TOOLS:
        raise ValueError(f"unknown device kind {kind!r}; one of {', '.join(KINDS)}")
    argv, parser = TOOLS[kind]
    return parser(run_tool(argv, timeout))


def read_inventory(kind: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> list[Device]:
    """Like ``read_devices`` but never raises for a tool problem.

    A missing, failing or unparseable tool gives one device of ``kind`` with health DEGRADED
    and ``error`` saying why; a tool that reports no device gives the same with
    "no device reported".

    Raises:
        ValueError: ``kind`` is not one of ``KINDS`` (a programming error, not a tool problem).
    """
    try:
        devices = read_devices(kind, timeout)
    except (DeviceToolError, DeviceParseError) as exc:
        return [failed_device(kind, str(exc))]
    except OSError as exc:
        return [failed_device(kind, f"cannot read device state: {exc.strerror or exc}")]
    if not devices:
        return [failed_device(kind, f"{kind}: no device reported")]
    return devices
