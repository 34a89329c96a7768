"""``xinserve devices``: the local device inventory."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from engine_backends.devices import KINDS, Device, Health, read_inventory
from engine_backends.devices.inventory import PRESENCE_TOOLS, kinds_present
from service.lifecycle.exit_codes import ExitCode


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "devices",
        help="show this host's devices (memory, utilisation, temperature, power, health)",
        description=(
            "Read this host's devices with their vendors' tools (NVML, "
            + ", ".join(dict.fromkeys(PRESENCE_TOOLS.values()))
            + ", /proc for the CPU). With no --device: the CPU and every kind "
            "whose tool is installed. Exit codes: 0 every device read and healthy, 1 a device is degraded, "
            "warning or critical (its error is shown), 2 bad usage."
        ),
    )
    p.add_argument("--device", choices=KINDS, action="append", help="device kind to read (repeatable)")
    p.add_argument("--json", action="store_true", help="one JSON object per device")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each tool (default 10)")
    p.set_defaults(func=_devices)


def _devices(args: argparse.Namespace) -> int:
    if not 0 < args.timeout <= 600:  # also refuses NaN, which compares false
        print("xinserve devices: --timeout must be in (0, 600] seconds", file=sys.stderr)
        return ExitCode.CONFIG
    devices: list[Device] = []
    for kind in args.device or kinds_present(args.timeout):
        devices.extend(read_inventory(kind, timeout=args.timeout))
    for d in devices:
        if args.json:
            row = asdict(d)
            row["health"] = d.health.value
            print(json.dumps(row, ensure_ascii=False))
        else:
            print(_line(d))
    return ExitCode.OK if all(d.health is Health.OK for d in devices) else ExitCode.DEGRADED


def _line(d: Device) -> str:
    if d.error:
        return f"{d.kind}:{d.index}  {d.health.value.upper()}  {d.error}"

    def gib(value: int | None) -> str:
        return "?" if value is None else f"{value / 1024**3:.1f}"

    parts = [
        f"{d.kind}:{d.index}",
        d.name or "?",
        f"mem {gib(d.memory_used_bytes)}/{gib(d.memory_total_bytes)} GiB",
        "util ?" if d.utilization_ratio is None else f"util {d.utilization_ratio:.0%}",
        "temp ?" if d.temperature_celsius is None else f"{d.temperature_celsius:g}°C",
        "power ?" if d.power_watts is None else f"{d.power_watts:g} W",
        d.health.value.upper(),
    ]
    if d.driver_version:
        parts.append(f"driver {d.driver_version}")
    return "  ".join(parts)
