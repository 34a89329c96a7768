"""Moore Threads: ``mthreads-gmi`` (2.x). Title ``mthreads-gmi:x  Driver Version:y``; header
``ID Name |PCIe |%GPU Mem``; each GPU is a group of lines between ``+---+`` rules whose first
line is ``index name |bus id |util% used MiB(total MiB)`` and second ``type perf |lanes
|temp ...``; a third line may carry the ECC mode. The ``Processes:`` block the tool
always prints after the GPUs is not read. The tool prints no power figure and no error
counts in this view, so health is OK for every GPU it lists (a GPU whose line cannot be read
is DEGRADED, naming the field). A virtual GPU (device type other than ``Physical``) that
prints 0 °C has no sensor of its own: its temperature is unknown (None), not 0 °C."""

from __future__ import annotations

import re

from engine_backends.devices.boxed_table import is_rule
from engine_backends.devices.model import Device, DeviceParseError, Health, unreadable_device
from engine_backends.devices.numbers import index, memory_bytes, number, percent_ratio

TOOL = "mthreads-gmi"
ARGV = ("mthreads-gmi",)
_MEM = re.compile(r"^(\S+)\((\S+)\)$")


def parse(text: str) -> list[Device]:
    """GPUs from ``mthreads-gmi`` output; a GPU group that cannot be read is one DEGRADED GPU.

    Raises:
        DeviceParseError: no ``ID Name |PCIe |%GPU`` header, or no rule under it.
    """
    lines = text.splitlines()
    driver_match = re.search(r"Driver Version:\s*(\S+)", text)
    header = next((i for i, line in enumerate(lines) if line.split()[:2] == ["ID", "Name"] and "%GPU" in line), None)
    if header is None:
        raise DeviceParseError(TOOL, "no 'ID Name |PCIe |%GPU Mem' header line")
    first_rule = next((i for i in range(header + 1, len(lines)) if is_rule(lines[i])), None)
    if first_rule is None:
        raise DeviceParseError(TOOL, "no rule line under the header")
    groups: list[tuple[int, list[str]]] = []
    current: list[str] = []
    start = first_rule + 1
    for number_ in range(first_rule + 1, len(lines)):
        line = lines[number_]
        if line.strip().startswith("Processes:"):
            break
        if is_rule(line):
            if current:
                groups.append((start, current))
            current, start = [], number_ + 1
        elif line.strip():
            current.append(line)
    if current:
        groups.append((start, current))
    driver = driver_match.group(1) if driver_match else ""
    devices = []
    for ordinal, (line_no, group) in enumerate(groups):
        try:
            devices.append(_gpu(group, line_no, driver))
        except DeviceParseError as exc:
            head = group[0].split(None, 1) if group else []
            idx = int(head[0]) if head and head[0].isdigit() and head[0].isascii() and len(head[0]) <= 4 else ordinal
            devices.append(unreadable_device("musa", idx, exc))
    return devices


def _gpu(group: list[str], line_no: int, driver: str) -> Device:
    where = f"line {line_no + 1}"
    if len(group) < 2:
        raise DeviceParseError(TOOL, f"{where}: expected at least two lines per GPU")
    first = [part.strip() for part in group[0].split("|")]
    second = [part.strip() for part in group[1].split("|")]
    if len(first) != 3 or len(second) != 3:
        raise DeviceParseError(TOOL, f"{where}: expected three '|'-separated columns")
    head = first[0].split(None, 1)
    if len(head) != 2:
        raise DeviceParseError(TOOL, f"{where}: expected 'index name'")
    util_mem = first[2].split()
    if len(util_mem) != 2 or (mem := _MEM.match(util_mem[1])) is None:
        raise DeviceParseError(TOOL, f"{where}: expected 'util% usedMiB(totalMiB)'")
    temp_words = second[2].split()
    temperature = number(TOOL, temp_words[0], f"{where} Temp", ("c",)) if temp_words else None
    device_type = second[0].split()[:1]
    if temperature == 0 and device_type != ["Physical"]:
        temperature = None
    return Device(
        kind="musa",
        index=index(TOOL, head[0], f"{where} index"),
        name=head[1].strip(),
        memory_total_bytes=memory_bytes(TOOL, mem.group(2), f"{where} memory total"),
        memory_used_bytes=memory_bytes(TOOL, mem.group(1), f"{where} memory used"),
        utilization_ratio=percent_ratio(TOOL, util_mem[0], f"{where} utilization"),
        temperature_celsius=temperature,
        health=Health.OK,
        driver_version=driver,
        bus_id=first[1],
    )
