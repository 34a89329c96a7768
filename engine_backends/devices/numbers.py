"""Reading the numbers vendor tools print: ``37C``, ``88W / 400W``, ``0MiB / 98304MiB``, ``N/A``."""

from __future__ import annotations

import math
import re

from engine_backends.devices.model import MIB, DeviceParseError

_NA = frozenset({"", "n/a", "na", "-", "--", "not supported", "[n/a]", "unknown"})
_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%°]*)\s*$")
_UNIT_BYTES = {"b": 1, "kib": 1024, "kb": 1024, "mib": MIB, "mb": MIB, "gib": 1024**3, "gb": 1024**3}


def is_na(text: str) -> bool:
    """True for the placeholders tools print for an absent figure (``N/A``, ``NA``, ``-``)."""
    return text.strip().lower() in _NA


def number(tool: str, text: str, what: str, units: tuple[str, ...] = ()) -> float | None:
    """Parse ``text`` (e.g. ``"37C"``, ``"88.6"``, ``"0%"``) as a finite number; None for N/A.

    ``units`` lists the suffixes accepted (case-insensitive, "" always allowed).

    Raises:
        DeviceParseError: not a number, an unexpected unit, or not finite.
    """
    if is_na(text):
        return None
    match = _NUMBER.match(text)
    if match is None:
        raise DeviceParseError(tool, f"{what}: expected a number, got {text.strip()[:40]!r}")
    value, unit = float(match.group(1)), match.group(2).lower()
    if unit and unit not in units:
        raise DeviceParseError(tool, f"{what}: unexpected unit {match.group(2)[:10]!r}")
    if not math.isfinite(value):
        raise DeviceParseError(tool, f"{what}: not a finite number")
    return value


def percent_ratio(tool: str, text: str, what: str) -> float | None:
    """``"45%"`` or ``"45"`` → 0.45; None for N/A. Raises DeviceParseError outside 0..100."""
    value = number(tool, text, what, ("%",))
    if value is None:
        return None
    if not 0 <= value <= 100:
        raise DeviceParseError(tool, f"{what}: {value} is not a percentage")
    return value / 100.0


def memory_bytes(tool: str, text: str, what: str, default_unit: str = "mib") -> int | None:
    """``"98304MiB"``, ``"23374 MiB"``, ``"65536"`` (in ``default_unit``) → bytes; None for N/A."""
    if is_na(text):
        return None
    match = _NUMBER.match(text)
    if match is None:
        raise DeviceParseError(tool, f"{what}: expected a memory size, got {text.strip()[:40]!r}")
    unit = (match.group(2) or default_unit).lower()
    if unit not in _UNIT_BYTES:
        raise DeviceParseError(tool, f"{what}: unknown memory unit {match.group(2)[:10]!r}")
    value = float(match.group(1))
    if value < 0 or not math.isfinite(value):
        raise DeviceParseError(tool, f"{what}: negative or not finite")
    return int(value * _UNIT_BYTES[unit])


def used_total(tool: str, text: str, what: str, default_unit: str = "mib") -> tuple[int | None, int | None]:
    """``"0MiB / 98304MiB"``, ``"20701/ 65536"``, ``"810/65536 MiB"`` → (used, total) bytes."""
    parts = text.split("/")
    if len(parts) != 2:
        raise DeviceParseError(tool, f"{what}: expected 'used / total', got {text.strip()[:40]!r}")
    used_text, total_text = parts[0].strip(), parts[1].strip()
    unit_match = re.search(r"([A-Za-z]+)\s*$", total_text)
    unit = unit_match.group(1) if unit_match else default_unit
    if used_text and used_text[-1].isdigit():
        used_text += unit
    return memory_bytes(tool, used_text, what, default_unit), memory_bytes(tool, total_text, what, default_unit)


def index(tool: str, text: str, what: str) -> int:
    """A device index: a non-negative decimal integer below 2**16."""
    text = text.strip()
    if not text.isdigit() or not text.isascii() or len(text) > 5 or int(text) >= 2**16:
        raise DeviceParseError(tool, f"{what}: expected a device index, got {text[:20]!r}")
    return int(text)
