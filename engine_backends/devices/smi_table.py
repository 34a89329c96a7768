"""The nvidia-smi-style boxed table several vendors copied (Kunlunxin and Intel ``xpu-smi``,
Cambricon ``cnmon``, MetaX ``mx-smi``): a title box, a header of column names, a ``|===|``
rule, then one box of two or three rows per device."""

from __future__ import annotations

from collections.abc import Callable

from engine_backends.devices.boxed_table import blocks, cells, is_rule
from engine_backends.devices.model import DeviceParseError


def title_cells(lines: list[str]) -> str:
    """The single-cell rows before the column header, joined (where the tool prints versions)."""
    out = []
    for line in lines:
        row = cells(line)
        if row is None:
            continue
        if len(row) > 1:
            break
        out.append(row[0])
    return " ".join(out)


def device_boxes(
    tool: str, lines: list[str], is_header: Callable[[list[str]], bool]
) -> list[tuple[int, list[list[str]]]]:
    """The device boxes: row groups after the header rule, each with its first line number.

    ``is_header`` recognises the first header row by its cells.

    Raises:
        DeviceParseError: no header row, or no ``|===|`` rule after it.
    """
    header = next((i for i, line in enumerate(lines) if (row := cells(line)) and is_header(row)), None)
    if header is None:
        raise DeviceParseError(tool, "no column header row")
    rule = next((i for i in range(header, len(lines)) if is_rule(lines[i])), None)
    if rule is None:
        raise DeviceParseError(tool, "no rule line under the column header")
    return list(blocks(lines, rule + 1))
