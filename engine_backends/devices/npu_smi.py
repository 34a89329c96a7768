"""Huawei Ascend: ``npu-smi info`` (the boxed table of CANN's npu-smi, 22.x–26.x).

The header row names the columns (``NPU Name | Health | Power(W) Temp(C) Hugepages-Usage(page)``
then ``Chip [Device] | Bus-Id | AICore(%) Memory-Usage(MB) [HBM-Usage(MB)]``); each chip is
two rows between rules. Memory is HBM when the chip has HBM (910 series), otherwise DDR
(310 series). Health is the tool's word: OK, Warning, Alarm, Critical (Ascend DCMI terms).
The index is the ``NPU`` id (``ASCEND_RT_VISIBLE_DEVICES`` takes it); the process table after
the chips is not read.
"""

from __future__ import annotations

import re

from engine_backends.devices.boxed_table import blocks, cells
from engine_backends.devices.model import Device, DeviceParseError, Health
from engine_backends.devices.numbers import index, is_na, number, percent_ratio, used_total

TOOL = "npu-smi"
ARGV = ("npu-smi", "info")

_HEALTH = {"ok": Health.OK, "warning": Health.WARNING, "alarm": Health.WARNING, "critical": Health.CRITICAL}
_VERSION = re.compile(r"Version:\s*(\S+)")


def parse(text: str) -> list[Device]:
    """Devices from ``npu-smi info`` output.

    Raises:
        DeviceParseError: no ``NPU ... Health`` header, a chip whose two rows are incomplete,
            or a figure that is not a number.
    """
    lines = text.splitlines()
    version = ""
    header = None
    for number_, line in enumerate(lines):
        if not version and (m := _VERSION.search(line)) and "npu-smi" in line:
            version = m.group(1)
        row = cells(line)
        if row and len(row) >= 3 and row[0].split()[:1] == ["NPU"] and row[1] == "Health":
            header = number_
            break
    if header is None:
        raise DeviceParseError(TOOL, "no 'NPU Name | Health' header row")
    hbm = "HBM-Usage" in lines[header + 1] if header + 1 < len(lines) else False
    devices = []
    for line_no, rows in blocks(lines, header + 2):
        if line_no == header + 2 and rows and rows[0] and rows[0][0].startswith("Chip"):
            continue
        if rows and rows[0] and rows[0][0].split()[:1] == ["NPU"] and "Process" in " ".join(rows[0]):
            break  # the process table
        if len(rows) != 2 or len(rows[0]) < 3 or len(rows[1]) < 3:
            raise DeviceParseError(TOOL, f"line {line_no + 1}: expected a chip's two 3-cell rows")
        devices.append(_chip(rows, line_no, hbm, version))
    return devices


def _chip(rows: list[list[str]], line_no: int, hbm: bool, version: str) -> Device:
    where = f"line {line_no + 1}"
    first = rows[0][0].split(None, 1)
    if len(first) != 2:
        raise DeviceParseError(TOOL, f"{where}: expected 'NPU-id Name'")
    npu = index(TOOL, first[0], f"{where} NPU id")
    health_word = rows[0][1].strip()
    health = _HEALTH.get(health_word.lower())
    if health is None:
        raise DeviceParseError(TOOL, f"{where}: unknown health {health_word[:20]!r}")
    figures = rows[0][2].split()
    if len(figures) < 2:
        raise DeviceParseError(TOOL, f"{where}: expected 'Power Temp ...'")
    power = number(TOOL, figures[0], f"{where} power", ("w",))
    temp = number(TOOL, figures[1], f"{where} temperature", ("c",))
    second = rows[1][2]
    aicore_text, _, memory_text = second.strip().partition(" ")
    usages = re.findall(r"(\S+\s*/\s*\S+)", memory_text)
    if not usages:
        raise DeviceParseError(TOOL, f"{where}: expected 'used / total' memory")
    chosen = usages[1] if hbm and len(usages) >= 2 else usages[0]
    used, total = used_total(TOOL, chosen, f"{where} memory", "mb")
    bus = rows[1][1].strip()
    return Device(
        kind="ascend",
        index=npu,
        name=first[1].strip(),
        memory_total_bytes=total,
        memory_used_bytes=used,
        utilization_ratio=percent_ratio(TOOL, aicore_text, f"{where} AICore"),
        temperature_celsius=temp,
        power_watts=power,
        health=health,
        driver_version=version,
        bus_id="" if is_na(bus) else bus,
    )
