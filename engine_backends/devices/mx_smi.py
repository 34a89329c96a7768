"""MetaX: ``mx-smi`` (2.1–2.3). Title ``MX-SMI x  Kernel Mode Driver Version: y``; header
``GPU NAME | Bus-id | GPU-Util``; two rows per GPU: ``index name | bus | util%`` and
``temp power[/cap] | used/total MiB | [GPU-State]``. A GPU-State other than ``Available``
is reported as CRITICAL."""

from __future__ import annotations

import re

from engine_backends.devices.model import Device, DeviceParseError, Health
from engine_backends.devices.numbers import index, number, percent_ratio, used_total
from engine_backends.devices.smi_table import device_boxes, title_cells

TOOL = "mx-smi"
ARGV = ("mx-smi",)


def parse(text: str) -> list[Device]:
    """GPUs from ``mx-smi`` output.

    Raises:
        DeviceParseError: no ``GPU NAME | Bus-id`` header or a GPU box that is incomplete.
    """
    lines = text.splitlines()
    title = title_cells(lines)
    driver_match = re.search(r"Driver Version:\s*(\S+)", title)
    bios_match = re.search(r"BIOS Version:\s*(\S+)", title)
    boxes = device_boxes(TOOL, lines, lambda row: row[0].split()[:2] == ["GPU", "NAME"])
    devices = []
    for line_no, rows in boxes:
        where = f"line {line_no + 1}"
        if len(rows) != 2 or any(len(r) != 3 for r in rows):
            raise DeviceParseError(TOOL, f"{where}: expected a GPU box of two 3-cell rows")
        head = rows[0][0].split(None, 1)
        if len(head) != 2:
            raise DeviceParseError(TOOL, f"{where}: expected 'index name'")
        figures = rows[1][0].split()
        if not figures:
            raise DeviceParseError(TOOL, f"{where}: expected 'temperature power'")
        used, total = used_total(TOOL, rows[1][1], f"{where} memory")
        state = rows[1][2].strip()
        devices.append(
            Device(
                kind="metax",
                index=index(TOOL, head[0], f"{where} index"),
                name=head[1].strip(),
                memory_total_bytes=total,
                memory_used_bytes=used,
                utilization_ratio=percent_ratio(TOOL, rows[0][2], f"{where} utilization"),
                temperature_celsius=number(TOOL, figures[0], f"{where} temperature", ("c",)),
                power_watts=number(TOOL, figures[1], f"{where} power", ("w",)) if len(figures) > 1 else None,
                health=Health.OK if state in ("", "Available") else Health.CRITICAL,
                driver_version=driver_match.group(1) if driver_match else "",
                firmware_version=bios_match.group(1) if bios_match else "",
                bus_id=rows[0][1].strip(),
            )
        )
    return devices
