"""Core conversion routines for Roman numerals.

Only the classic range 1..3999 is supported; there is no zero and no
vinculum (overline) notation for larger values.
"""

from __future__ import annotations

MIN_VALUE = 1
MAX_VALUE = 3999

# Symbol table, largest value first.
_SYMBOLS: list[tuple[str, int]] = [
    ("M", 1000),
    ("D", 500),
    ("C", 100),
    ("L", 50),
    ("X", 10),
    ("V", 5),
    ("I", 1),
]

_VALUES: dict[str, int] = {symbol: value for symbol, value in _SYMBOLS}


def _check_range(number: int) -> None:
    """Raise ``ValueError`` unless ``number`` is an int in the supported range."""
    if isinstance(number, bool) or not isinstance(number, int):
        raise TypeError(f"expected an int, got {type(number).__name__}")
    if not MIN_VALUE <= number <= MAX_VALUE:
        raise ValueError(
            f"{number} is outside the supported range {MIN_VALUE}..{MAX_VALUE}"
        )


def to_roman(number: int) -> str:
    """Return the Roman numeral for ``number``.

    >>> to_roman(2023)
    'MMXXIII'
    """
    _check_range(number)
    parts: list[str] = []
    remaining = number
    for symbol, value in _SYMBOLS:
        count, remaining = divmod(remaining, value)
        parts.append(symbol * count)
    return "".join(parts)


def from_roman(numeral: str) -> int:
    """Return the integer value of the Roman numeral ``numeral``.

    Leading/trailing whitespace is ignored and the numeral is case-insensitive.

    >>> from_roman("MMXXIII")
    2023
    """
    if not isinstance(numeral, str):
        raise TypeError(f"expected a str, got {type(numeral).__name__}")
    text = numeral.strip().upper()
    if not text:
        raise ValueError("empty Roman numeral")
    total = 0
    for char in text:
        if char not in _VALUES:
            raise ValueError(f"invalid Roman numeral character {char!r} in {numeral!r}")
        total += _VALUES[char]
    _check_range(total)
    return total
