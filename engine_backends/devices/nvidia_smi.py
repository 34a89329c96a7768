"""NVIDIA: ``nvidia-smi -q -x`` (XML, DTD ``nvsmi_device_v*.dtd``), or NVML through nvidia-ml-py.

Fields read per ``<gpu>``: ``product_name``, ``fb_memory_usage/{total,used}``,
``utilization/gpu_util``, ``temperature/gpu_temp``, ``gpu_power_readings/power_draw`` (v12+;
``instant_power_draw`` in v13, ``power_readings/power_draw`` before v12), ``vbios_version``,
top-level ``driver_version``. The index is the ``<gpu>`` element's position (nvidia-smi
orders them by PCI bus id, as ``CUDA_VISIBLE_DEVICES`` with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from engine_backends.devices.model import Device, DeviceParseError, DeviceToolError, Health
from engine_backends.devices.numbers import is_na, memory_bytes, number, percent_ratio
from engine_backends.devices.tool_runner import run_tool

TOOL = "nvidia-smi"
ARGV = ("nvidia-smi", "-q", "-x")


_UNCORRECTABLE = (
    "ecc_errors/volatile/dram_uncorrectable",
    "ecc_errors/volatile/sram_uncorrectable",
    "ecc_errors/volatile/double_bit/total",
)


def _health(gpu: ET.Element) -> Health:
    """CRITICAL: a volatile uncorrectable ECC count above 0, or a row-remapping failure;
    WARNING: a page retirement or row remapping pending (a reset is due); else OK."""

    def text(path: str) -> str:
        return (gpu.findtext(path) or "").strip()

    if any(text(p).isdigit() and int(text(p)) > 0 for p in _UNCORRECTABLE):
        return Health.CRITICAL
    if text("remapped_rows/remapping_failure_occurred") == "Yes":
        return Health.CRITICAL
    if "Yes" in (text("retired_pages/pending_retirement"), text("remapped_rows/remapped_row_pending")):
        return Health.WARNING
    return Health.OK


def parse(text: str) -> list[Device]:
    """Devices from ``nvidia-smi -q -x`` output. Health: see ``_health``; a vGPU guest's 0 °C
    (``virtualization_mode`` VGPU, no sensor of its own) is an unknown temperature.

    Raises:
        DeviceParseError: not XML, not an ``nvidia_smi_log``, entity declarations (refused by
            defusedxml), or a
            field that is not the number it should be.
    """
    try:
        root = SafeET.fromstring(text)
    except ET.ParseError as exc:
        raise DeviceParseError(TOOL, f"not well-formed XML ({exc})") from None
    except DefusedXmlException as exc:
        raise DeviceParseError(TOOL, f"entity declarations are not accepted ({type(exc).__name__})") from None
    if root.tag != "nvidia_smi_log":
        raise DeviceParseError(TOOL, f"root element is <{root.tag[:40]}>, expected <nvidia_smi_log>")
    driver = (root.findtext("driver_version") or "").strip()
    devices = []
    for position, gpu in enumerate(root.findall("gpu")):
        where = f"gpu {position}"

        def field(path: str, gpu: ET.Element = gpu) -> str:
            return (gpu.findtext(path) or "").strip()

        name = field("product_name")
        if not name:
            raise DeviceParseError(TOOL, f"{where}: no <product_name>")
        power_text = next(
            (
                t
                for t in (
                    field("gpu_power_readings/power_draw"),
                    field("gpu_power_readings/instant_power_draw"),
                    field("power_readings/power_draw"),
                )
                if t and not is_na(t)
            ),
            "",
        )
        temperature = number(TOOL, field("temperature/gpu_temp"), f"{where} temperature", ("c",))
        if temperature == 0 and field("gpu_virtualization_mode/virtualization_mode") == "VGPU":
            temperature = None
        devices.append(
            Device(
                kind="cuda",
                index=position,
                name=name,
                memory_total_bytes=memory_bytes(TOOL, field("fb_memory_usage/total"), f"{where} memory total"),
                memory_used_bytes=memory_bytes(TOOL, field("fb_memory_usage/used"), f"{where} memory used"),
                utilization_ratio=percent_ratio(TOOL, field("utilization/gpu_util"), f"{where} utilization"),
                temperature_celsius=temperature,
                power_watts=number(TOOL, power_text, f"{where} power", ("w",)),
                health=_health(gpu),
                driver_version=driver,
                firmware_version=field("vbios_version"),
                bus_id=gpu.get("id", ""),
            )
        )
    return devices


def read_nvml() -> list[Device]:
    """Devices through NVML (``nvidia-ml-py``), the library nvidia-smi itself uses.

    Raises:
        DeviceToolError: nvidia-ml-py is not installed or NVML cannot initialise (no driver).
    """
    try:
        import pynvml
    except ImportError as exc:
        raise DeviceToolError("nvidia-ml-py is not installed") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise DeviceToolError(f"NVML: {exc}") from None
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = _nvml(pynvml.nvmlDeviceGetMemoryInfo, handle)
            util = _nvml(pynvml.nvmlDeviceGetUtilizationRates, handle)
            temp = _nvml(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
            power_mw = _nvml(pynvml.nvmlDeviceGetPowerUsage, handle)
            devices.append(
                Device(
                    kind="cuda",
                    index=i,
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    memory_total_bytes=int(mem.total) if mem is not None else None,
                    memory_used_bytes=int(mem.used) if mem is not None else None,
                    utilization_ratio=util.gpu / 100.0 if util is not None else None,
                    temperature_celsius=float(temp) if temp is not None else None,
                    power_watts=power_mw / 1000.0 if power_mw is not None else None,
                    driver_version=driver,
                )
            )
        return devices
    except pynvml.NVMLError as exc:
        raise DeviceToolError(f"NVML: {exc}") from None
    finally:
        pynvml.nvmlShutdown()


def read(timeout: float) -> list[Device]:
    """The NVIDIA devices through NVML, else through ``nvidia-smi -q -x`` (``timeout`` seconds).

    Raises:
        DeviceToolError: neither NVML nor nvidia-smi answered (the message gives both reasons).
        DeviceParseError: nvidia-smi's XML is not in the format ``parse`` knows.
    """
    try:
        return read_nvml()
    except DeviceToolError as nvml_error:
        try:
            return parse(run_tool(ARGV, timeout))
        except DeviceToolError as exc:
            raise DeviceToolError(f"{nvml_error}; {exc}") from None


def _nvml(call: Any, *args: Any) -> Any:
    import pynvml

    try:
        return call(*args)
    except pynvml.NVMLError_NotSupported:
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
