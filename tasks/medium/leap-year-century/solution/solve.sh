#!/usr/bin/env bash
# Reference fix: the Gregorian rule: divisible by 4, except centuries not divisible by 400.
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("calendar_util.py")
src = path.read_text()
old = '    return year % 4 == 0\n'
new = '    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n'
assert old in src, "unexpected calendar_util.py"
path.write_text(src.replace(old, new))
PY
