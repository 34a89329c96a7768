"""Chips, and their device inventory and health: one parser per vendor tool, read in a
subprocess with a timeout; the chip registry (``registry.CHIPS``) ties each chip's reader,
platform profile, supported vLLM, Kubernetes resource and image together.

``read_inventory(kind)`` never raises for a tool problem: the device is reported with the
error and health DEGRADED. ``check_visible_devices`` validates a visible-devices selection
against the inventory before an engine starts.
"""

from engine_backends.devices.inventory import KINDS, read_devices, read_inventory
from engine_backends.devices.model import Device, DeviceParseError, DeviceToolError, Health
from engine_backends.devices.registry import CHIPS, Chip
from engine_backends.devices.visible import check_visible_devices

__all__ = [
    "CHIPS",
    "KINDS",
    "Chip",
    "Device",
    "DeviceParseError",
    "DeviceToolError",
    "Health",
    "check_visible_devices",
    "read_devices",
    "read_inventory",
]
