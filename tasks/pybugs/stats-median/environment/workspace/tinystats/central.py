"""Measures of central tendency."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

Number = int | float


def _require_data(values: Sequence) -> None:
    if len(values) == 0:
        raise ValueError("no data points given")


def mean(values: Sequence[Number]) -> float:
    """Arithmetic mean of ``values``."""
    _require_data(values)
    return sum(values) / len(values)


def median(values: Sequence[Number]) -> Number:
    """Median (middle value) of ``values``.

    For an even number of data points this is the mean of the two middle
    values.  ``values`` is not modified.
    """
    _require_data(values)
    values.sort()
    return values[len(values) // 2]


def mode(values: Sequence[Hashable]) -> Hashable:
    """Most common value; ties are broken by first occurrence."""
    _require_data(values)
    counts = Counter(values)
    best = max(counts.values())
    for value in values:
        if counts[value] == best:
            return value
    raise AssertionError("unreachable")
