"""Standard-library names that Python 3.10 lacks, for the vendor images that still ship it.

``StrEnum`` is :class:`enum.StrEnum` on Python >= 3.11; on 3.10 an equivalent ``(str, Enum)``
base: members are ``str`` instances, ``str(member)`` and ``format(member)`` (f-strings) give
the value, and ``auto()`` gives the lower-cased member name, as Python 3.11's ``StrEnum``
(https://docs.python.org/3/library/enum.html#enum.StrEnum).
"""

from __future__ import annotations

import enum
import sys

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, enum.Enum):
        """Python 3.11's :class:`enum.StrEnum` for Python 3.10."""

        def __str__(self) -> str:
            return str.__str__(self)

        def __format__(self, format_spec: str) -> str:
            return str.__format__(self, format_spec)

        @staticmethod
        def _generate_next_value_(name: str, start: int, count: int, last_values: list[str]) -> str:
            return name.lower()


__all__ = ["StrEnum"]
