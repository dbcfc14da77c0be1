"""Integer rounding shared by the layout code (one spelling of ceil division)."""

from __future__ import annotations


def ceil_div(value: int, divisor: int) -> int:
    """``ceil(value / divisor)`` for ints, without going through floats."""
    return -(-value // divisor)


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is >= ``value``."""
    return ceil_div(value, multiple) * multiple
