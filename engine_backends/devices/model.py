"""What the device inventory reports: one ``Device`` per chip, and the errors of reading it."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Health(enum.Enum):
    """A device's health as its vendor tool reports it, or DEGRADED when it cannot be read.

    ``OK``: the tool reports the chip healthy (or reports no fault). ``WARNING``: the tool
    reports a warning or alarm state (e.g. npu-smi ``Warning``/``Alarm``). ``CRITICAL``: the
    tool reports the chip failed or in error. ``DEGRADED``: the tool is missing, failed, timed
    out or printed something the parser does not understand: the chip's state is unknown.
    """

    OK = "ok"
    WARNING = "warning"
    CRITICAL = "critical"
    DEGRADED = "degraded"


@dataclass(frozen=True)
class Device:
    """One accelerator (or the host CPU) as read from its vendor's tool.

    Attributes:
        kind: xinserve's device name (``cpu``, ``cuda``, ``ascend``, ``kunlun``, ``mlu``,
            ``musa``, ``dcu``, ``metax``, ``xpu``).
        index: the id the tool reports for this chip, distinct per chip (Ascend: the chip's
            physical id, ``Phy-ID``, where the tool prints one, else the NPU id).
        card: the card (board) id the chip sits on where the tool prints one (Ascend: the
            ``NPU`` id; two dies of an A3 card share it), else None.
        visible_id: the id the vendor's visible-devices variable takes for this chip, when it
            differs from ``index`` (Ascend: the logical id, see ``npu_smi``), else None.
        name: product name, e.g. ``"NVIDIA A100-SXM4-80GB"``, ``"910B2C"``, ``"P800 OAM"``.
        memory_total_bytes / memory_used_bytes: device memory (HBM/VRAM; host RAM for CPU).
        utilization_ratio: compute utilisation in [0, 1].
        temperature_celsius: chip temperature in °C.
        power_watts: current board power draw in W.
        health: see ``Health``.
        driver_version / firmware_version: as the tool prints them, "" when it does not.
        bus_id: PCI bus id where the tool prints it.
        error: why the device could not be read ("" when it could); for a device whose
            tool output was read but one figure was not, it names that field.
        placeholder: True for the one entry that stands for a whole kind whose tool could not
            be read (``failed_device``): it is not a chip.
        None means the tool did not report that figure.
    """

    kind: str
    index: int
    name: str = ""
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    utilization_ratio: float | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    health: Health = Health.OK
    driver_version: str = ""
    firmware_version: str = ""
    bus_id: str = ""
    error: str = ""
    card: int | None = None
    visible_id: int | None = None
    placeholder: bool = False

    @property
    def selection_id(self) -> int:
        """The id a visible-devices selection names this chip by (``visible_id`` or ``index``)."""
        return self.index if self.visible_id is None else self.visible_id


class DeviceToolError(Exception):
    """A vendor tool could not be run or did not answer: missing, timed out, exit status != 0.

    The message names the tool and the reason; it never carries the tool's full output.
    """


class DeviceParseError(ValueError):
    """A vendor tool's output is not in the format its parser knows.

    ``tool`` names the tool, ``reason`` says what was expected and not found (with a line
    number where one applies).
    """

    def __init__(self, tool: str, reason: str) -> None:
        super().__init__(f"{tool}: {reason}")
        self.tool = tool
        self.reason = reason


MIB = 1024**2


def failed_device(kind: str, error: str, index: int = 0) -> Device:
    """The placeholder reported when a kind's tool cannot be read: health DEGRADED, with why."""
    return Device(kind=kind, index=index, health=Health.DEGRADED, error=error, placeholder=True)


def unreadable_device(kind: str, index: int, error: DeviceParseError, **known: object) -> Device:
    """One chip whose entry in the tool's output could not be read: health DEGRADED, ``error``
    naming the field; the other chips of the same output are unaffected. ``known`` carries
    the fields already read (``name``, ``bus_id``, ``card``, ``visible_id``)."""
    return Device(kind=kind, index=index, health=Health.DEGRADED, error=str(error), **known)  # type: ignore[arg-type]
