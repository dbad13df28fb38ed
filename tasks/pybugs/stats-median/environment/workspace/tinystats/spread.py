"""Measures of spread and a one-call summary."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .central import Number, _require_data, mean, median


def variance(values: Sequence[Number], sample: bool = True) -> float:
    """Variance of ``values``.

    With ``sample=True`` (the default) this is the unbiased sample variance
    and needs at least two data points.
    """
    _require_data(values)
    n = len(values)
    if sample and n < 2:
        raise ValueError("sample variance needs at least two data points")
    mu = mean(values)
    ss = sum((x - mu) ** 2 for x in values)
    return ss / (n - 1 if sample else n)


def stdev(values: Sequence[Number], sample: bool = True) -> float:
    """Standard deviation (square root of :func:`variance`)."""
    return math.sqrt(variance(values, sample=sample))


def value_range(values: Sequence[Number]) -> tuple[Number, Number]:
    """``(min, max)`` of ``values``."""
    _require_data(values)
    return min(values), max(values)


def describe(values: Sequence[Number]) -> dict[str, Number]:
    """Summary statistics for a dashboard tile."""
    lo, hi = value_range(values)
    return {
        "count": len(values),
        "min": lo,
        "max": hi,
        "mean": mean(values),
        "median": median(values),
        "stdev": stdev(values) if len(values) > 1 else 0.0,
    }
