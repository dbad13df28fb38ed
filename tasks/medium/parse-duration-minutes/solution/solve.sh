#!/usr/bin/env bash
# Reference fix: a minute is 60 seconds.
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("duration.py")
src = path.read_text()
old = '_UNITS = {"h": 3600, "m": 3600, "s": 1}\n'
new = '_UNITS = {"h": 3600, "m": 60, "s": 1}\n'
assert old in src, "unexpected duration.py"
path.write_text(src.replace(old, new))
PY
