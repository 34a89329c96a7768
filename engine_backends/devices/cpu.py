"""The host CPU: ``/proc/cpuinfo`` (model, sockets, cores), ``/proc/meminfo`` (host memory),
and two ``/proc/stat`` samples (utilisation). Reported as one device, index 0: what vLLM's CPU
backend uses is the host's cores and memory as a whole."""

from __future__ import annotations

import os
import platform
import time

from engine_backends.devices.model import Device, DeviceParseError, Health

TOOL = "/proc/cpuinfo"


def parse(cpuinfo: str, meminfo: str, stat_before: str | None = None, stat_after: str | None = None) -> Device:
    """The host CPU from the text of ``/proc/cpuinfo`` and ``/proc/meminfo``.

    Utilisation is computed from two ``/proc/stat`` samples when both are given (busy jiffies
    over all jiffies between them, the ``cpu`` line).

    Raises:
        DeviceParseError: no ``processor`` entry, or no ``MemTotal``/``MemAvailable`` in kB.
    """
    processors = 0
    model = ""
    sockets: set[str] = set()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor":
            processors += 1
        elif key in ("model name", "Model Name", "cpu model") and not model:
            model = value
        elif key == "physical id":
            sockets.add(value)
    if processors == 0:
        raise DeviceParseError(TOOL, "no 'processor' entry")
    mem = _meminfo(meminfo)
    util = _utilisation(stat_before, stat_after) if stat_before and stat_after else None
    name = f"{model or platform.machine()} ({processors} logical CPUs, {max(len(sockets), 1)} socket(s))"
    return Device(
        kind="cpu",
        index=0,
        name=name,
        memory_total_bytes=mem["MemTotal"],
        memory_used_bytes=mem["MemTotal"] - mem["MemAvailable"],
        utilization_ratio=util,
        health=Health.OK,
        driver_version=f"Linux {platform.release()}",
    )


def _meminfo(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        words = value.split()
        if key in ("MemTotal", "MemAvailable") and len(words) == 2 and words[1] == "kB" and words[0].isdigit():
            out[key] = int(words[0]) * 1024
    if set(out) != {"MemTotal", "MemAvailable"} or out["MemAvailable"] > out["MemTotal"]:
        raise DeviceParseError("/proc/meminfo", "expected 'MemTotal' and 'MemAvailable' in kB")
    return out


def _jiffies(text: str) -> tuple[int, int]:
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["cpu"] and len(words) >= 5 and all(w.isdigit() for w in words[1:]):
            values = [int(w) for w in words[1:]]
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            return sum(values), idle
    raise DeviceParseError("/proc/stat", "no aggregate 'cpu' line")


def _utilisation(before: str, after: str) -> float | None:
    total0, idle0 = _jiffies(before)
    total1, idle1 = _jiffies(after)
    elapsed = total1 - total0
    if elapsed <= 0:
        return None
    return min(1.0, max(0.0, 1.0 - (idle1 - idle0) / elapsed))


def read(sample_seconds: float = 0.25, proc: str = "/proc") -> Device:
    """The host CPU read from ``/proc`` now (blocks ``sample_seconds`` between the two samples).

    Raises:
        OSError: ``/proc`` cannot be read (not Linux).
        DeviceParseError: as ``parse``.
    """

    def text(name: str) -> str:
        with open(os.path.join(proc, name), encoding="utf-8", errors="replace") as f:
            return f.read()

    before = text("stat")
    time.sleep(sample_seconds)
    return parse(text("cpuinfo"), text("meminfo"), before, text("stat"))
