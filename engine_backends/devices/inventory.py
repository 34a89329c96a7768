"""Device inventory per device kind: each kind's reader comes from its chip registry entry
(``devices.registry.KIND_CHIPS``), and ``read_inventory`` is the one call that never raises.

docs/deploy.md ("Device inventory and health") lists what each kind's reader runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine_backends.devices.model import Device, DeviceParseError, DeviceToolError, failed_device
from engine_backends.devices.registry import KIND_CHIPS, Reader
from engine_backends.devices.tool_runner import ToolReader

DEFAULT_TIMEOUT_SECONDS = 10.0

READERS: dict[str, Reader] = {kind: chip.reader for kind, chip in KIND_CHIPS.items()}
KINDS = tuple(READERS)
# kind -> (argv, parser) for the kinds read through one command-line tool.
TOOLS: dict[str, tuple[Sequence[str], Callable[[str], list[Device]]]] = {
    kind: (reader.argv, reader.parse) for kind, reader in READERS.items() if isinstance(reader, ToolReader)
}


def read_devices(kind: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> list[Device]:
    """The devices of ``kind`` as its tool reports them now.

    Raises:
        ValueError: ``kind`` is not one of ``KINDS``.
        DeviceToolError: the tool is missing, failed or timed out.
        DeviceParseError: the tool's output is not in the format its parser knows.
        OSError: ``/proc`` cannot be read (cpu).
    """
    reader = READERS.get(kind)
    if reader is None:
        raise ValueError(f"unknown device kind {kind!r}; one of {', '.join(KINDS)}")
    return reader(timeout)


def read_inventory(kind: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> list[Device]:
    """Like ``read_devices`` but never raises for a tool problem.

    A missing, failing or unparseable tool gives one device of ``kind`` with health DEGRADED
    and ``error`` saying why; a tool that reports no device gives the same with
    "no device reported".

    Raises:
        ValueError: ``kind`` is not one of ``KINDS`` (a programming error, not a tool problem).
    """
    try:
        devices = read_devices(kind, timeout)
    except (DeviceToolError, DeviceParseError) as exc:
        return [failed_device(kind, str(exc))]
    except OSError as exc:
        return [failed_device(kind, f"cannot read device state: {exc.strerror or exc}")]
    if not devices:
        return [failed_device(kind, f"{kind}: no device reported")]
    return devices
