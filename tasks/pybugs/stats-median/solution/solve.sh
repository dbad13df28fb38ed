#!/usr/bin/env bash
set -euo pipefail
# Sort a copy (never the caller's list) and average the two middle values
# for even-length data.
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

p = Path("tinystats/central.py")
src = p.read_text()
old = '''    _require_data(values)
    values.sort()
    return values[len(values) // 2]
'''
new = '''    _require_data(values)
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2
'''
assert old in src, "unexpected central.py contents"
p.write_text(src.replace(old, new))
PY
