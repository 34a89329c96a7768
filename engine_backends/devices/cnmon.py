"""Cambricon MLU: ``cnmon`` (``cnmon info`` prints the same summary table on CNMON v4–v6).

Title ``CNMON vX [Driver vY]``; header ``Card VF Name Firmware | [Inited Driver |] Bus-Id |
Util Ecc-Error``; two rows per card: ``index VF name firmware | … | util% ecc`` and
``fan temp power/cap | used MiB/ total MiB | …``. The index is the card id
(``MLU_VISIBLE_DEVICES`` takes it). Health: an ``Ecc-Error`` count above 0 is CRITICAL,
0 or ``N/A`` is OK.
"""

from __future__ import annotations

import re

from engine_backends.devices.model import Device, DeviceParseError, Health, unreadable_device
from engine_backends.devices.numbers import index, number, percent_ratio, used_total
from engine_backends.devices.smi_table import device_boxes, title_cells

TOOL = "cnmon"
ARGV = ("cnmon",)


def parse(text: str) -> list[Device]:
    """Cards from ``cnmon`` output.

    A card box without the two rows and figures expected is one DEGRADED card naming the
    field; the other cards are unaffected.

    Raises:
        DeviceParseError: no ``Card VF Name Firmware`` header, or no rule under it.
    """
    lines = text.splitlines()
    title = title_cells(lines)
    driver_match = re.search(r"Driver\s+v?(\S+)", title)
    title_driver = driver_match.group(1) if driver_match else ""
    boxes = device_boxes(TOOL, lines, lambda row: row[0].split()[:2] == ["Card", "VF"])
    devices = []
    for ordinal, (line_no, rows) in enumerate(boxes):
        try:
            devices.append(_card(rows, line_no, title_driver))
        except DeviceParseError as exc:
            head = rows[0][0].split() if rows and rows[0] else []
            idx = int(head[0]) if head and head[0].isdigit() and head[0].isascii() and len(head[0]) <= 4 else ordinal
            devices.append(unreadable_device("mlu", idx, exc))
    return devices


def _card(rows: list[list[str]], line_no: int, title_driver: str) -> Device:
    where = f"line {line_no + 1}"
    if len(rows) != 2 or any(len(r) != 3 for r in rows):
        raise DeviceParseError(TOOL, f"{where}: expected a card box of two 3-cell rows")
    head = rows[0][0].split()
    if len(head) < 4:
        raise DeviceParseError(TOOL, f"{where}: expected 'Card VF Name Firmware'")
    idx = index(TOOL, head[0], f"{where} card")
    driver = title_driver
    middle = rows[0][1].split()
    if not driver and middle and middle[-1].startswith("v"):
        driver = middle[-1].removeprefix("v")
    figures = rows[1][0]
    temp_match = re.search(r"(\d+(?:\.\d+)?C)\b", figures)
    power_match = re.search(r"(\S+)\s*W\s*/", figures)
    used, total = used_total(TOOL, rows[1][1], f"{where} memory")
    util_words = rows[0][2].split()
    ecc = util_words[-1] if len(util_words) >= 2 else "N/A"
    ecc_count = number(TOOL, ecc, f"{where} Ecc-Error")
    return Device(
        kind="mlu",
        index=idx,
        name=" ".join(head[2:-1]),
        memory_total_bytes=total,
        memory_used_bytes=used,
        utilization_ratio=percent_ratio(TOOL, util_words[0] if util_words else "N/A", f"{where} utilization"),
        temperature_celsius=number(TOOL, temp_match.group(1), f"{where} temperature", ("c",)) if temp_match else None,
        power_watts=number(TOOL, power_match.group(1), f"{where} power", ("w",)) if power_match else None,
        health=Health.CRITICAL if ecc_count else Health.OK,
        driver_version=driver,
        firmware_version=head[-1].removeprefix("v"),
        bus_id=middle[0] if middle and ":" in middle[0] else "",
    )
