"""``trust.compat.StrEnum`` behaves as Python 3.11's ``enum.StrEnum`` (scripts/check-py310 runs
this under Python 3.10, where it is the module's own class)."""

from __future__ import annotations

import json
from enum import auto

from trust.compat import StrEnum


class Colour(StrEnum):
    RED = "red"
    DARK_BLUE = auto()


def test_members_are_their_values_as_str_and_in_formatting():
    assert isinstance(Colour.RED, str) and Colour.RED == "red"
    assert str(Colour.RED) == "red"
    assert f"{Colour.RED}|{Colour.RED:>5}|{Colour.RED!s}" == "red|  red|red"
    assert "%s" % Colour.RED == "red"  # noqa: UP031 (printf-style formatting is what is tested)
    assert json.dumps({"c": Colour.RED}) == '{"c": "red"}'
    assert repr(Colour.RED) == "<Colour.RED: 'red'>"


def test_auto_gives_the_lower_cased_name_and_lookup_by_value():
    assert Colour.DARK_BLUE == "dark_blue"
    assert Colour("red") is Colour.RED
    assert [str(c) for c in Colour] == ["red", "dark_blue"]
