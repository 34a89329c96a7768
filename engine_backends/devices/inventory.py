"""Device inventory per device kind: each kind's reader comes from its chip registry entry
(``devices.registry.KIND_CHIPS``), and ``read_inventory`` is the one call that never raises.

docs/deploy.md ("Device inventory and health") lists what each kind's reader runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine_backends.devices import nvidia_smi
from engine_backends.devices.model import Device, DeviceParseError, DeviceToolError, failed_device
from engine_backends.devices.registry import KIND_CHIPS, Reader
from engine_backends.devices.tool_runner import ToolReader, find_tool

DEFAULT_TIMEOUT_SECONDS = 10.0

READERS: dict[str, Reader] = {kind: chip.reader for kind, chip in KIND_CHIPS.items()}
KINDS = tuple(READERS)
# kind -> (argv, parser) for the kinds read through one command-line tool.
TOOLS: dict[str, tuple[Sequence[str], Callable[[str], list[Device]]]] = {
    kind: (reader.argv, reader.parse) for kind, reader in READERS.items() if isinstance(reader, ToolReader)
}

# kind -> the command whose presence shows the kind's devices may be on this host (the CPU has
# none: it is always there). CUDA is read through NVML, with nvidia-smi as its tool.
PRESENCE_TOOLS: dict[str, str] = {
    kind: reader.argv[0] if isinstance(reader, ToolReader) else nvidia_smi.ARGV[0]
    for kind, reader in READERS.items()
    if kind == "cuda" or isinstance(reader, ToolReader)
}


def kinds_present(timeout: float = DEFAULT_TIMEOUT_SECONDS) -> list[str]:
    """The device kinds to read on this host when none is named, in ``KINDS`` order: ``cpu``,
    and each kind whose tool (``PRESENCE_TOOLS``) is installed (``find_tool``).

    A tool that two kinds share (``xpu-smi``: Kunlunxin's and Intel's) is run once per kind,
    ``timeout`` seconds at most each, and gives the kinds whose parser reads its output; the
    first of them when none does, so that its failure is shown.
    """
    kinds = ["cpu"]
    by_tool: dict[str, list[str]] = {}
    for kind, tool in PRESENCE_TOOLS.items():
        by_tool.setdefault(tool, []).append(kind)
    for tool, sharing in by_tool.items():
        if not find_tool(tool):
            continue
        if len(sharing) == 1:
            kinds.extend(sharing)
            continue
        readable = [kind for kind in sharing if _reads(kind, timeout)]
        kinds.extend(readable or sharing[:1])
    return sorted(kinds, key=KINDS.index)


def _reads(kind: str, timeout: float) -> bool:
    try:
        return bool(read_devices(kind, timeout))
    except (DeviceToolError, DeviceParseError, OSError):
        return False


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
