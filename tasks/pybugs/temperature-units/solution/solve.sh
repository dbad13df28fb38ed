#!/usr/bin/env bash
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
import pathlib

path = pathlib.Path("weatherkit/units.py")
src = path.read_text()

old_norm = '    return _ALIASES.get(unit.strip().lower(), unit)\n'
new_norm = (
    '    try:\n'
    '        return _ALIASES[unit.strip().lower()]\n'
    '    except (KeyError, AttributeError):\n'
    '        raise ValueError(\n'
    '            f"unknown temperature unit {unit!r}; expected one of C, F, K "\n'
    '            "(or celsius, fahrenheit, kelvin)"\n'
    '        ) from None\n'
)
assert old_norm in src
src = src.replace(old_norm, new_norm)

start = src.index("    if src == \"C\" and dst == \"F\":")
new_body = '''    # Go through Celsius: it keeps every pair of units consistent.
    if src == "F":
        celsius = (value - 32) * 5 / 9
    elif src == "K":
        celsius = value - 273.15
    else:
        celsius = value
    if dst == "F":
        return celsius * 9 / 5 + 32
    if dst == "K":
        return celsius + 273.15
    return celsius
'''
src = src[:start] + new_body
path.write_text(src)
PY
