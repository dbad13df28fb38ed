#!/usr/bin/env bash
# Reference fix: add the subtractive pairs to the symbol table used by
# to_roman, and make from_roman subtract a symbol that precedes a larger one.
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("numerals/core.py")
src = path.read_text()

old_table = '''_SYMBOLS: list[tuple[str, int]] = [
    ("M", 1000),
    ("D", 500),
    ("C", 100),
    ("L", 50),
    ("X", 10),
    ("V", 5),
    ("I", 1),
]

_VALUES: dict[str, int] = {symbol: value for symbol, value in _SYMBOLS}
'''
new_table = '''_SYMBOLS: list[tuple[str, int]] = [
    ("M", 1000),
    ("CM", 900),
    ("D", 500),
    ("CD", 400),
    ("C", 100),
    ("XC", 90),
    ("L", 50),
    ("XL", 40),
    ("X", 10),
    ("IX", 9),
    ("V", 5),
    ("IV", 4),
    ("I", 1),
]

_VALUES: dict[str, int] = {
    symbol: value for symbol, value in _SYMBOLS if len(symbol) == 1
}
'''
old_loop = '''    total = 0
    for char in text:
        if char not in _VALUES:
            raise ValueError(f"invalid Roman numeral character {char!r} in {numeral!r}")
        total += _VALUES[char]
'''
new_loop = '''    for char in text:
        if char not in _VALUES:
            raise ValueError(f"invalid Roman numeral character {char!r} in {numeral!r}")
    total = 0
    for index, char in enumerate(text):
        value = _VALUES[char]
        following = _VALUES[text[index + 1]] if index + 1 < len(text) else 0
        total += -value if value < following else value
'''
if new_table not in src:
    assert old_table in src, "unexpected numerals/core.py (symbol table)"
    src = src.replace(old_table, new_table)
if new_loop not in src:
    assert old_loop in src, "unexpected numerals/core.py (from_roman loop)"
    src = src.replace(old_loop, new_loop)
path.write_text(src)
PY
