"""MetaX: ``mx-smi`` (2.1–2.3). Title ``MX-SMI x  Kernel Mode Driver Version: y`` (and
``MACA Version``/``BIOS Version``); then one of two headers:

- 2.1–2.2.6: ``GPU NAME [Persistence-M] | Bus-id | GPU-Util [sGPU-M]`` over ``Temp
  Pwr:Usage/Cap [Perf] | Memory-Usage | GPU-State``: two 3-cell rows per GPU.
- 2.2.8+ (2.2.9, 2.3.x): ``Board Name | GPU Persist-M | Bus-id | GPU-Util sGPU-M`` over
  ``Pwr:Usage/Cap | Temp Perf | Memory-Usage | GPU-State``: two 4-cell rows per GPU; the GPU
  id is the first word of the second cell.

Health: GPU-State ``Available`` is OK, any other state CRITICAL (the tool prints no error
counters in this view). A GPU box that cannot be read is one DEGRADED GPU naming the field.
The process table after the GPUs is not read.
"""

from __future__ import annotations

import re

from engine_backends.devices.model import Device, DeviceParseError, Health, unreadable_device
from engine_backends.devices.numbers import index, number, percent_ratio, used_total
from engine_backends.devices.smi_table import device_boxes, title_cells

TOOL = "mx-smi"
ARGV = ("mx-smi",)
_FLAGS = ("On", "Off", "N/A")


def _is_header(row: list[str]) -> bool:
    return row[0].split()[:2] in (["GPU", "NAME"], ["Board", "Name"])


def parse(text: str) -> list[Device]:
    """GPUs from ``mx-smi`` output.

    Raises:
        DeviceParseError: no ``GPU NAME | Bus-id`` / ``Board Name | GPU`` header, or no rule
            under it.
    """
    lines = text.splitlines()
    title = title_cells(lines)
    driver_match = re.search(r"Driver Version:\s*(\S+)", title)
    bios_match = re.search(r"BIOS Version:\s*(\S+)", title)
    driver = driver_match.group(1) if driver_match else ""
    bios = bios_match.group(1) if bios_match else ""
    devices = []
    for ordinal, (line_no, rows) in enumerate(device_boxes(TOOL, lines, _is_header)):
        if rows and rows[0] and rows[0][0].startswith("Process"):
            break
        try:
            devices.append(_gpu(rows, line_no, driver, bios))
        except DeviceParseError as exc:
            head = rows[0][0].split() if rows and rows[0] else []
            idx = int(head[0]) if head and head[0].isdigit() and head[0].isascii() and len(head[0]) <= 4 else ordinal
            devices.append(unreadable_device("metax", idx, exc))
    return devices


def _gpu(rows: list[list[str]], line_no: int, driver: str, bios: str) -> Device:
    where = f"line {line_no + 1}"
    if len(rows) != 2 or len(rows[0]) != len(rows[1]) or len(rows[0]) not in (3, 4):
        raise DeviceParseError(TOOL, f"{where}: expected a GPU box of two rows of 3 or 4 cells")
    first, second = rows
    if len(first) == 4:
        # Board Name | GPU Persist-M | Bus-id | GPU-Util sGPU-M
        name_words = first[0].split()[1:]
        gpu_words = first[1].split()
        if not gpu_words:
            raise DeviceParseError(TOOL, f"{where}: expected 'GPU Persist-M'")
        idx = index(TOOL, gpu_words[0], f"{where} GPU")
        power_text = second[0].split("/")[0]
        temp_words = second[1].split()
        memory, state, bus, util = second[2], second[3], first[2], first[3]
    else:
        # GPU NAME [Persistence-M] | Bus-id | GPU-Util [sGPU-M]
        head = first[0].split()
        if len(head) < 2:
            raise DeviceParseError(TOOL, f"{where}: expected 'index name'")
        idx = index(TOOL, head[0], f"{where} GPU")
        name_words = head[1:]
        figures = second[0].split()
        if not figures:
            raise DeviceParseError(TOOL, f"{where}: expected 'Temp Pwr:Usage/Cap'")
        temp_words = figures[:1]
        power_text = figures[1] if len(figures) > 1 else "N/A"
        memory, state, bus, util = second[1], second[2], first[1], first[2]
    if name_words and name_words[-1] in _FLAGS:
        name_words = name_words[:-1]
    used, total = used_total(TOOL, memory, f"{where} Memory-Usage")
    state = state.strip()
    return Device(
        kind="metax",
        index=idx,
        name=" ".join(name_words),
        memory_total_bytes=total,
        memory_used_bytes=used,
        utilization_ratio=percent_ratio(TOOL, (util.split() or ["N/A"])[0], f"{where} GPU-Util"),
        temperature_celsius=number(TOOL, temp_words[0], f"{where} Temp", ("c",)) if temp_words else None,
        power_watts=number(TOOL, power_text.strip(), f"{where} Pwr:Usage", ("w",)),
        health=Health.OK if state in ("", "Available") else Health.CRITICAL,
        driver_version=driver,
        firmware_version=bios,
        bus_id=bus.strip(),
    )
