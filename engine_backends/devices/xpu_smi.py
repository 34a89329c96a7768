"""``xpu-smi``: two different tools share the name.

- Kunlunxin (Baidu Kunlun, ``kunlun``): title ``XPU-SMI  Driver Version: …  XPU-RT Version: …``,
  an nvidia-smi-like table, three rows per XPU (the third is L3 SRAM usage).
- Intel XPU Manager's ``xpu-smi`` (Intel GPUs, ``xpu``): title ``Intel XPU-SMI vX  Driver: …
  Level Zero: …`` (v2.0 table), or older builds without the summary table at all.

Kunlunxin installs the same tool as ``xpu_smi`` on some driver releases; the runner tries
``xpu-smi`` and then ``xpu_smi`` (``tool_runner.ALIASES``). A device box that cannot be read is
one DEGRADED device naming the field. Health (Kunlunxin): a ``Volatile Uncorr. ECC`` count
above 0 is CRITICAL; Intel's summary table prints no error counter (OK).

``detect`` tells them apart from the title; each parser refuses the other's output with a
message saying which tool it is, so a Kunlun host never reports an Intel card or the reverse.
"""

from __future__ import annotations

import re

from engine_backends.devices.model import Device, DeviceParseError, Health, unreadable_device
from engine_backends.devices.numbers import index, number, percent_ratio, used_total
from engine_backends.devices.smi_table import device_boxes, title_cells

TOOL = "xpu-smi"
ARGV = ("xpu-smi",)
KUNLUN = "kunlunxin"
INTEL = "intel"


def detect(text: str) -> str:
    """``"kunlunxin"`` or ``"intel"`` from the tool's title; raises DeviceParseError otherwise."""
    title = title_cells(text.splitlines())
    if "XPU-RT Version" in title or re.search(r"XPU-SMI\s+Driver Version", title):
        return KUNLUN
    if "Intel" in title or "Level Zero" in title or "Device Type: GPU" in text:
        return INTEL
    raise DeviceParseError(TOOL, "neither Kunlunxin's nor Intel's xpu-smi title was found")


def parse_kunlun(text: str) -> list[Device]:
    """Kunlunxin XPUs from ``xpu-smi``.

    Raises:
        DeviceParseError: the output is Intel's xpu-smi, or not the Kunlunxin table.
    """
    if detect(text) != KUNLUN:
        raise DeviceParseError(TOOL, "this xpu-smi is Intel's XPU Manager, not Kunlunxin's")
    return _parse(text, "kunlun")


def parse_intel(text: str) -> list[Device]:
    """Intel GPUs from Intel's ``xpu-smi`` (v2.0 summary table).

    Raises:
        DeviceParseError: the output is Kunlunxin's xpu-smi, or not the Intel table.
    """
    if detect(text) != INTEL:
        raise DeviceParseError(TOOL, "this xpu-smi is Kunlunxin's, not Intel's XPU Manager")
    return _parse(text, "xpu")


def _parse(text: str, kind: str) -> list[Device]:
    lines = text.splitlines()
    title = title_cells(lines)
    driver_match = re.search(r"Driver(?: Version)?:\s*(\S+)", title)
    driver = driver_match.group(1) if driver_match else ""
    boxes = device_boxes(TOOL, lines, lambda row: len(row) == 3 and row[0].split()[:1] in (["XPU"], ["GPU"]))
    devices = []
    for ordinal, (line_no, rows) in enumerate(boxes):
        try:
            devices.append(_device(kind, rows, line_no, driver))
        except DeviceParseError as exc:
            head = rows[0][0].split() if rows and rows[0] else []
            idx = int(head[0]) if head and head[0].isdigit() and head[0].isascii() and len(head[0]) <= 4 else ordinal
            devices.append(unreadable_device(kind, idx, exc))
    return devices


def _device(kind: str, rows: list[list[str]], line_no: int, driver: str) -> Device:
    where = f"line {line_no + 1}"
    if len(rows) < 2 or any(len(r) != 3 for r in rows):
        raise DeviceParseError(TOOL, f"{where}: expected a device box of 3-cell rows")
    head = rows[0][0].split()
    if len(head) < 2:
        raise DeviceParseError(TOOL, f"{where}: expected 'index name'")
    idx = index(TOOL, head[0], f"{where} index")
    name_tokens = head[1:]
    if name_tokens and name_tokens[-1] in ("N/A", "On", "Off"):
        name_tokens = name_tokens[:-1]
    memory_row = next((r for r in rows[1:] if "/" in r[1]), None)
    if memory_row is None:
        raise DeviceParseError(TOOL, f"{where}: no 'used / total' memory cell")
    used, total = used_total(TOOL, memory_row[1], f"{where} memory")
    figures = memory_row[0]
    temp_match = re.search(r"(\S+C)\b", figures)
    power_match = re.search(r"(\S+)\s*/\s*\S+W", figures)
    util_text = memory_row[2].split()[0] if memory_row[2].split() else "N/A"
    health = Health.OK
    if kind == "kunlun":
        ecc = number(TOOL, rows[0][2].strip() or "N/A", f"{where} Volatile Uncorr. ECC")
        health = Health.CRITICAL if ecc else Health.OK
    return Device(
        kind=kind,
        index=idx,
        name=" ".join(name_tokens),
        memory_total_bytes=total,
        memory_used_bytes=used,
        utilization_ratio=percent_ratio(TOOL, util_text, f"{where} utilization"),
        temperature_celsius=number(TOOL, temp_match.group(1), f"{where} temperature", ("c",)) if temp_match else None,
        power_watts=number(TOOL, power_match.group(1), f"{where} power", ("w",)) if power_match else None,
        health=health,
        driver_version=driver,
        bus_id=rows[0][1].split()[0] if rows[0][1].split() else "",
    )
