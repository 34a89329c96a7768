"""Huawei Ascend: ``npu-smi info`` (the boxed table of CANN's npu-smi, 22.x–26.x).

Each chip is two rows between rules, under a two-row header. The layouts read:

- 910B (Atlas 800 A2) and 310B: ``NPU Name | Health | Power(W) Temp(C) Hugepages-Usage(page)``
  over ``Chip | Bus-Id | AICore(%) Memory-Usage(MB) [HBM-Usage(MB)]``: one chip per NPU id.
- 310P: the second header row is ``Chip Device``; the second chip row carries the chip id and
  the device id.
- A3 (Atlas 800/900 A3, ``Ascend910``): the second header row is ``Chip Phy-ID``; each NPU id
  (card) is listed once per die, and the second row carries the chip id and the die's
  physical id.
- 950 (A5, 25.6+): separate ``NPU ID | Name | Health | …`` cells and ``NPU Util(%)``.

Memory is HBM when the header has an HBM column (910/950), otherwise DDR (310). Health is the
tool's word: OK, Warning, Alarm (WARNING), Critical, Error (CRITICAL) (Ascend DCMI terms); any
other word leaves that chip DEGRADED, naming the field.

Ids: ``card`` is the NPU id; ``index`` is the die's Phy-ID on A3 (distinct per die) and the
NPU id elsewhere; ``visible_id`` is the chip's position in the listing (0, 1, …), which is the
logical id ``ASCEND_RT_VISIBLE_DEVICES`` takes: the runtime numbers the chips it can see from
0 in NPU-id/chip order, so in a container that shows NPU 4–7 of a host the logical ids are
still 0–7 (A3) or 0–3 (910B), while the tool prints the physical ids. The process table after
the chips is not read.
"""

from __future__ import annotations

import re

from engine_backends.devices.boxed_table import blocks, cells
from engine_backends.devices.model import Device, DeviceParseError, Health, unreadable_device
from engine_backends.devices.numbers import index, is_na, number, percent_ratio, used_total

TOOL = "npu-smi"
ARGV = ("npu-smi", "info")

_HEALTH = {
    "ok": Health.OK,
    "warning": Health.WARNING,
    "alarm": Health.WARNING,
    "critical": Health.CRITICAL,
    "error": Health.CRITICAL,
}
_VERSION = re.compile(r"Version:\s*(\S+)")


def _header(lines: list[str]) -> tuple[int, int, str]:
    """(header line number, number of cells before ``Health``, version)."""
    version = ""
    for number_, line in enumerate(lines):
        if not version and (m := _VERSION.search(line)) and "npu-smi" in line:
            version = m.group(1)
        row = cells(line)
        if row and "Health" in row and row[0].split()[:1] == ["NPU"]:
            health_at = row.index("Health")
            if 1 <= health_at <= 2 and len(row) > health_at + 1:
                return number_, health_at, version
    raise DeviceParseError(TOOL, "no 'NPU Name | Health' header row")


def parse(text: str) -> list[Device]:
    """Chips from ``npu-smi info`` output, one ``Device`` per chip (per die on A3).

    A chip whose rows or figures cannot be read is reported DEGRADED with the field named;
    the other chips are unaffected.

    Raises:
        DeviceParseError: no ``NPU ... Health`` header row.
    """
    lines = text.splitlines()
    header, health_at, version = _header(lines)
    second = cells(lines[header + 1]) if header + 1 < len(lines) else None
    second_names = " ".join(second[:health_at]).split() if second else []
    hbm = bool(second) and "HBM-Usage" in " ".join(second or [])
    per_die = any(name.lower() == "phy-id" for name in second_names)
    devices: list[Device] = []
    for line_no, rows in blocks(lines, header + 2):
        if rows and " ".join(rows[0]).find("Process id") >= 0:
            break  # the process table
        ordinal = len(devices)
        try:
            devices.append(_chip(rows, line_no, health_at, hbm, per_die, version, ordinal))
        except DeviceParseError as exc:
            card = _leading_id(rows[0][:health_at]) if rows and rows[0] else None
            devices.append(
                unreadable_device(
                    "ascend", card if card is not None and not per_die else ordinal, exc, card=card, visible_id=ordinal
                )
            )
    return devices


def _leading_id(parts: list[str]) -> int | None:
    words = " ".join(parts).split()
    return int(words[0]) if words and words[0].isdigit() and words[0].isascii() and len(words[0]) <= 5 else None


def _chip(
    rows: list[list[str]], line_no: int, health_at: int, hbm: bool, per_die: bool, version: str, ordinal: int
) -> Device:
    where = f"line {line_no + 1}"
    if len(rows) != 2 or len(rows[0]) < health_at + 2 or len(rows[1]) < health_at + 2:
        raise DeviceParseError(TOOL, f"{where}: expected a chip's two rows of {health_at + 2} cells")
    first = " ".join(rows[0][:health_at]).split(None, 1)
    if len(first) != 2:
        raise DeviceParseError(TOOL, f"{where}: expected 'NPU-id Name'")
    npu = index(TOOL, first[0], f"{where} NPU id")
    ids = " ".join(rows[1][:health_at]).split()
    chip_index = npu
    if per_die:
        if len(ids) != 2:
            raise DeviceParseError(TOOL, f"{where}: expected 'Chip Phy-ID'")
        chip_index = index(TOOL, ids[1], f"{where} Phy-ID")
    health_word = rows[0][health_at].strip()
    health = _HEALTH.get(health_word.lower())
    if health is None:
        raise DeviceParseError(TOOL, f"{where}: Health: unknown word {health_word[:20]!r}")
    figures = rows[0][health_at + 1].split()
    if len(figures) < 2:
        raise DeviceParseError(TOOL, f"{where}: expected 'Power Temp ...'")
    power = number(TOOL, figures[0], f"{where} Power(W)", ("w",))
    temp = number(TOOL, figures[1], f"{where} Temp(C)", ("c",))
    second = rows[1][health_at + 1]
    util_text, _, memory_text = second.strip().partition(" ")
    usages = re.findall(r"(\S+\s*/\s*\S+)", memory_text)
    if not usages:
        raise DeviceParseError(TOOL, f"{where}: expected 'used / total' memory")
    chosen = usages[1] if hbm and len(usages) >= 2 else usages[0]
    used, total = used_total(TOOL, chosen, f"{where} {'HBM' if hbm else 'Memory'}-Usage(MB)", "mb")
    bus = rows[1][health_at].strip()
    return Device(
        kind="ascend",
        index=chip_index,
        name=first[1].strip(),
        memory_total_bytes=total,
        memory_used_bytes=used,
        utilization_ratio=percent_ratio(TOOL, util_text, f"{where} AICore(%)"),
        temperature_celsius=temp,
        power_watts=power,
        health=health,
        driver_version=version,
        bus_id="" if is_na(bus) else bus,
        card=npu,
        visible_id=ordinal,
    )
