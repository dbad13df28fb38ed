#!/usr/bin/env bash
# Reference fix: an even-length input averages the two middle values.
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("stats.py")
src = path.read_text()
old = '    return ordered[len(ordered) // 2]\n'
new = '    mid = len(ordered) // 2\n    if len(ordered) % 2:\n        return ordered[mid]\n    return (ordered[mid - 1] + ordered[mid]) / 2\n'
assert old in src, "unexpected stats.py"
path.write_text(src.replace(old, new))
PY
