"""Checking a visible-devices selection (``ASCEND_RT_VISIBLE_DEVICES=0,1`` …) against the inventory."""

from __future__ import annotations

from collections.abc import Sequence

from engine_backends.devices.model import Device, Health


class VisibleDevicesError(ValueError):
    """The selection names a device the inventory does not have, or cannot be checked."""


def parse_selection(selection: str) -> list[int]:
    """``"0,1, 3"`` → [0, 1, 3]. Raises VisibleDevicesError for anything but distinct indices."""
    ids = []
    for part in selection.split(","):
        part = part.strip()
        if not part.isdigit() or not part.isascii() or len(part) > 5:
            raise VisibleDevicesError(f"visible devices {selection!r}: {part!r} is not a device index")
        ids.append(int(part))
    if len(set(ids)) != len(ids):
        raise VisibleDevicesError(f"visible devices {selection!r}: a device is listed twice")
    return ids


def check_visible_devices(kind: str, selection: str, inventory: Sequence[Device]) -> list[int]:
    """The selected ids, each the ``selection_id`` of a chip in ``inventory``.

    The ids checked are those the vendor's visible-devices variable takes: ``visible_id``
    where the parser sets one (Ascend: the logical id, the chip's position in ``npu-smi
    info``, which is what ``ASCEND_RT_VISIBLE_DEVICES`` numbers, also inside a container
    where the tool shows physical NPU ids such as 4-7), else the tool's index. A chip whose
    figures could not all be read (health DEGRADED with its own error) still counts as
    present; only a kind whose tool could not be read at all (the ``placeholder`` entry)
    makes the selection uncheckable.

    Raises:
        VisibleDevicesError: a malformed selection; the inventory could not be read (the
            message carries the tool's error); or a selected id the inventory lacks (the
            message names it and lists the ones present).
    """
    ids = parse_selection(selection)
    failed = [d for d in inventory if d.placeholder and d.health is Health.DEGRADED]
    if failed:
        raise VisibleDevicesError(f"cannot check visible {kind} devices {selection!r}: {failed[0].error}")
    present = sorted({d.selection_id for d in inventory if d.kind == kind and not d.placeholder})
    missing = [i for i in ids if i not in present]
    if missing:
        raise VisibleDevicesError(
            f"visible {kind} device(s) {', '.join(map(str, missing))} not present; "
            f"the host has {', '.join(map(str, present)) or 'none'}"
        )
    return ids
