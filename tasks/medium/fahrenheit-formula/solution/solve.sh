#!/usr/bin/env bash
# Reference fix: Fahrenheit is Celsius x 9/5 + 32.
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("units.py")
src = path.read_text()
old = '    return celsius * 5 / 9 + 32\n'
new = '    return celsius * 9 / 5 + 32\n'
assert old in src, "unexpected units.py"
path.write_text(src.replace(old, new))
PY
