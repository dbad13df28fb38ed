#!/usr/bin/env bash
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("agenda/intervals.py")
src = path.read_text()
old = '''    merged: list[Interval] = []
    for interval in intervals:
        start, end = _check(interval)
        if merged and start < merged[-1][1]:
'''
new = '''    checked = sorted((_check(interval) for interval in intervals), key=lambda iv: iv[0])
    merged: list[Interval] = []
    for start, end in checked:
        if merged and start <= merged[-1][1]:
'''
assert old in src, "patch did not apply"
path.write_text(src.replace(old, new, 1))
PY
