"""Temperature unit conversion.

Supported units are Celsius, Fahrenheit and Kelvin. Units may be given by
symbol or by name, case-insensitively: ``"C"``, ``"celsius"``, ``"F"``,
``"fahrenheit"``, ``"K"``, ``"kelvin"``.
"""

from __future__ import annotations

UNITS = ("C", "F", "K")

_ALIASES = {
    "c": "C",
    "celsius": "C",
    "f": "F",
    "fahrenheit": "F",
    "k": "K",
    "kelvin": "K",
}


def _normalize(unit: str) -> str:
    """Map a unit symbol or name to one of :data:`UNITS`."""
    return _ALIASES.get(unit.strip().lower(), unit)


def convert(value: float, from_unit: str, to_unit: str) -> float:
    """Convert a temperature ``value`` from ``from_unit`` to ``to_unit``.

    >>> convert(100, "C", "F")
    212.0
    >>> convert(32, "fahrenheit", "celsius")
    0.0
    """
    src = _normalize(from_unit)
    dst = _normalize(to_unit)
    value = float(value)
    if src == dst:
        return value
    if src == "C" and dst == "F":
        return value * 9 / 5 + 32
    if src == "F" and dst == "C":
        return (value - 32) * 5 / 9
    if src == "C" and dst == "K":
        return value + 273
    if src == "K" and dst == "C":
        return value - 273
    if src == "F" and dst == "K":
        return (value - 32) * 5 / 9 + 273
    if src == "K" and dst == "F":
        return (value + 273) * 9 / 5 + 32
    return value
