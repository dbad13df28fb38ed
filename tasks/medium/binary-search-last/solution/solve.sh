#!/usr/bin/env bash
# Reference fix: the search interval is inclusive: loop while lo <= hi.
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("search.py")
src = path.read_text()
old = '    while lo < hi:\n'
new = '    while lo <= hi:\n'
assert old in src, "unexpected search.py"
path.write_text(src.replace(old, new))
PY
