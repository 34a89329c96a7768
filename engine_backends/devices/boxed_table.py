"""Splitting the boxed tables that nvidia-smi-style tools print (``| a | b |`` rows, ``+---+`` rules)."""

from __future__ import annotations

from collections.abc import Iterator


def is_rule(line: str) -> bool:
    """A ``+----+====+`` or ``|=====|`` separator line."""
    body = line.strip()
    return bool(body) and set(body) <= set("+-=|")


def cells(line: str) -> list[str] | None:
    """The stripped cells of a ``| a | b |`` row, or None when the line is not a row."""
    body = line.strip()
    if len(body) < 2 or not body.startswith("|") or not body.endswith("|") or is_rule(body):
        return None
    return [c.strip() for c in body[1:-1].split("|")]


def blocks(lines: list[str], start: int) -> Iterator[tuple[int, list[list[str]]]]:
    """From line ``start`` on, yield (line number, rows) for each group of rows between rules.

    Stops at the first line that is neither a row nor a rule (e.g. the blank line before a
    tool's process table).
    """
    group: list[list[str]] = []
    first = start
    for number in range(start, len(lines)):
        line = lines[number]
        if is_rule(line):
            if group:
                yield first, group
            group = []
            first = number + 1
            continue
        row = cells(line)
        if row is None:
            break
        group.append(row)
    if group:
        yield first, group
