"""Hygon DCU: ``hy-smi --json`` (a rocm-smi derivative, DTK 23–25).

The output is ``{"card0": {"field": "value", ...}, "card1": {...}}`` with rocm-smi's field
names, where Hygon uses ``HCU``/``DCU`` for ``GPU`` (``HCU use (%)``, ``DCU use (%)``). Real
hy-smi builds print this JSON with missing commas between some fields and repeated empty
keys, which ``json.loads`` refuses; the parser therefore reads it as a sequence of
``"key": "value"`` pairs inside each ``"cardN": {...}`` object, which accepts both the valid
and the malformed form and nothing else. The index is N of ``cardN`` (``HIP_VISIBLE_DEVICES``
takes it).

Some flags print plain text even with ``--json`` (a banner or a line of their own before or
after the object); that text is ignored, never mixed into the JSON. hy-smi builds without
JSON output print the plain summary table instead (``DCU|HCU  Temp  AvgPwr  Perf  PwrCap
VRAM%  DCU%|HCU%  [Dec%  Enc%]  Mode`` between ``=====`` rules): it is read too, giving
temperature, power and utilisation (its VRAM% is a ratio, so memory is absent). The tool
reports no error counters in either view: health is OK for every card read, and a card whose
figure cannot be read is one DEGRADED card naming the field.
"""

from __future__ import annotations

import dataclasses
import re

from engine_backends.devices.model import Device, DeviceParseError, DeviceToolError, Health, unreadable_device
from engine_backends.devices.numbers import index, memory_bytes, number, percent_ratio
from engine_backends.devices.tool_runner import find_tool, run_tool

TOOL = "hy-smi"
ARGV = (
    "hy-smi",
    "--showproductname",
    "--showmeminfo",
    "vram",
    "--showuse",
    "--showtemp",
    "--showpower",
    "--json",
)
# ``--showdriverversion`` prints a text line (``Driver Version: 6.3.27-V1.2.5``) whatever else
# is asked, so it runs on its own and never joins the JSON call.
DRIVER_ARGV = ("hy-smi", "--showdriverversion")
_DRIVER_LINE = re.compile(r"Driver Version\s*:\s*(\S{1,64})", re.IGNORECASE)
# Builds without JSON output: the plain summary table (``parse_table``).
TABLE_ARGV = ("hy-smi",)

_CARD = re.compile(r'"card(\d{1,4})"\s*:\s*\{([^{}]*)\}')
_PAIR = re.compile(r'"([^"\\]{0,200})"\s*:\s*(?:"([^"\\]{0,200})"|([-+0-9.eE]{1,40}[A-Za-z%]{0,4}))')
_MAX_TEXT = 4 * 1024 * 1024

_UTIL = ("HCU use (%)", "DCU use (%)", "GPU use (%)")
_TEMP = ("Temperature (Sensor junction) (C)", "Temperature (Sensor edge) (C)", "Temperature (Sensor core) (C)")
_POWER = ("Average Graphics Package Power (W)", "Current Socket Graphics Package Power (W)")
_NAME = ("Card Series", "Card series", "Card Model", "Card model", "Device Name")
_TOTAL = (("vram Total Memory (MiB)", "mib"), ("VRAM Total Memory (B)", "b"), ("vram Total Memory (B)", "b"))
_USED = (
    ("vram Total Used Memory (MiB)", "mib"),
    ("VRAM Total Used Memory (B)", "b"),
    ("vram Total Used Memory (B)", "b"),
)


def parse(text: str) -> list[Device]:
    """DCUs from ``hy-smi --json`` output (valid or with hy-smi's missing commas, text around
    it ignored), or from the plain summary table of builds without JSON.

    Raises:
        DeviceParseError: neither a ``{"cardN": {...}}`` object nor the summary table, or the
            same card twice.
    """
    if len(text) > _MAX_TEXT:
        raise DeviceParseError(TOOL, "output larger than 4 MiB")
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        if _table_header(text.splitlines()) is not None:
            return parse_table(text)
        raise DeviceParseError(TOOL, "expected a JSON object of cards or the summary table")
    text = text[start : end + 1]
    driver_match = re.search(r'"Driver version"\s*:\s*"([^"\\]{1,64})"', text)
    devices: dict[int, Device] = {}
    for match in _CARD.finditer(text):
        idx = int(match.group(1))
        if idx in devices:
            raise DeviceParseError(TOOL, f"card{idx} appears twice")
        fields: dict[str, str] = {}
        for pair in _PAIR.finditer(match.group(2)):
            fields.setdefault(pair.group(1), pair.group(2) if pair.group(2) is not None else pair.group(3))
        try:
            devices[idx] = _card(idx, fields, driver_match.group(1) if driver_match else "")
        except DeviceParseError as exc:
            devices[idx] = unreadable_device("dcu", idx, exc)
    if not devices:
        raise DeviceParseError(TOOL, 'no "cardN": {...} object')
    return [devices[i] for i in sorted(devices)]


def _first(fields: dict[str, str], names: tuple[str, ...]) -> str:
    return next((fields[n] for n in names if n in fields), "N/A")


def _card(idx: int, fields: dict[str, str], driver: str) -> Device:
    where = f"card{idx}"
    total = used = None
    for name, unit in _TOTAL:
        if name in fields:
            total = memory_bytes(TOOL, fields[name], f"{where} memory total", unit)
            break
    for name, unit in _USED:
        if name in fields:
            used = memory_bytes(TOOL, fields[name], f"{where} memory used", unit)
            break
    return Device(
        kind="dcu",
        index=idx,
        name=_first(fields, _NAME).strip() if _first(fields, _NAME) != "N/A" else "",
        memory_total_bytes=total,
        memory_used_bytes=used,
        utilization_ratio=percent_ratio(TOOL, _first(fields, _UTIL), f"{where} utilization"),
        temperature_celsius=number(TOOL, _first(fields, _TEMP), f"{where} temperature", ("c",)),
        power_watts=number(TOOL, _first(fields, _POWER), f"{where} power", ("w",)),
        health=Health.OK,
        driver_version=driver,
        firmware_version=fields.get("VBIOS version", ""),
        bus_id=fields.get("PCI Bus", ""),
    )


def parse_driver_version(text: str) -> str:
    """The version from ``hy-smi --showdriverversion``'s text, "" when it prints none."""
    match = _DRIVER_LINE.search(text[:_MAX_TEXT])
    return match.group(1) if match else ""


_TABLE_IDS = ("DCU", "HCU")


def _table_header(lines: list[str]) -> tuple[int, list[str]] | None:
    for number_, line in enumerate(lines):
        words = line.split()
        if len(words) >= 7 and words[0] in _TABLE_IDS and words[1:3] == ["Temp", "AvgPwr"]:
            return number_, words
    return None


def parse_table(text: str) -> list[Device]:
    """DCUs from the plain ``hy-smi`` summary table (one line per card under the header).

    Raises:
        DeviceParseError: no ``DCU|HCU Temp AvgPwr`` header, or the same card twice.
    """
    lines = text.splitlines()
    found = _table_header(lines)
    if found is None:
        raise DeviceParseError(TOOL, "no 'DCU Temp AvgPwr' header line")
    header, names = found
    util_name = next((n for n in names if n in ("DCU%", "HCU%")), None)
    devices: dict[int, Device] = {}
    for number_ in range(header + 1, len(lines)):
        words = lines[number_].split()
        if not words or set(lines[number_].strip()) <= set("="):
            if words:
                break
            continue
        where = f"line {number_ + 1}"
        try:
            idx = index(TOOL, words[0], f"{where} {names[0]}")
        except DeviceParseError:
            break
        if idx in devices:
            raise DeviceParseError(TOOL, f"{where}: card {idx} appears twice")
        try:
            if len(words) != len(names):
                raise DeviceParseError(TOOL, f"{where}: expected {len(names)} columns, got {len(words)}")
            row = dict(zip(names, words, strict=True))
            devices[idx] = Device(
                kind="dcu",
                index=idx,
                utilization_ratio=percent_ratio(TOOL, row[util_name], f"{where} {util_name}") if util_name else None,
                temperature_celsius=number(TOOL, row["Temp"], f"{where} Temp", ("c",)),
                power_watts=number(TOOL, row["AvgPwr"], f"{where} AvgPwr", ("w",)),
                health=Health.OK,
            )
        except DeviceParseError as exc:
            devices[idx] = unreadable_device("dcu", idx, exc)
    return [devices[i] for i in sorted(devices)]


def read(timeout: float) -> list[Device]:
    """The DCUs through ``hy-smi --json``, else (hy-smi present, JSON refused or unreadable)
    through the plain table; the driver version from ``hy-smi --showdriverversion`` where the
    first call did not give it. ``timeout`` is in seconds per call.

    Raises:
        DeviceToolError: hy-smi is missing, failed or timed out.
        DeviceParseError: neither view is in a format the parsers know (both reasons named).
    """
    try:
        devices = parse(run_tool(ARGV, timeout))
    except (DeviceToolError, DeviceParseError) as json_error:
        if find_tool(TOOL) is None:
            raise
        try:
            devices = parse_table(run_tool(TABLE_ARGV, timeout))
        except DeviceParseError as exc:
            raise DeviceParseError(TOOL, f"{json_error}; plain table: {exc.reason}") from None
        except DeviceToolError as exc:
            raise DeviceToolError(f"{json_error}; {exc}") from None
    return _with_driver(devices, timeout)


def _with_driver(devices: list[Device], timeout: float) -> list[Device]:
    if all(d.driver_version for d in devices):
        return devices
    try:
        driver = parse_driver_version(run_tool(DRIVER_ARGV, timeout))
    except DeviceToolError:
        return devices
    return [d if d.driver_version else dataclasses.replace(d, driver_version=driver) for d in devices]
