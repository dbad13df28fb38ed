"""Station readings."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean
from typing import Dict, Iterable

from .units import convert


@dataclass(frozen=True)
class Reading:
    """A single temperature reading from a station."""

    station: str
    value: float
    unit: str = "C"

    def to(self, unit: str) -> "Reading":
        """Return the same reading expressed in ``unit``."""
        return Reading(self.station, convert(self.value, self.unit, unit), unit)


def summarize(readings: Iterable[Reading], unit: str = "C") -> Dict[str, float]:
    """Return min / max / mean of ``readings``, all expressed in ``unit``.

    Raises ``ValueError`` if ``readings`` is empty.
    """
    values = [r.to(unit).value for r in readings]
    if not values:
        raise ValueError("no readings to summarize")
    return {"min": min(values), "max": max(values), "mean": mean(values)}
