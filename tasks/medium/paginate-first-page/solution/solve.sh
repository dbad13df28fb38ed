#!/usr/bin/env bash
# Reference fix: pages are numbered from 1, so page p starts at (p - 1) x per_page.
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("pages.py")
src = path.read_text()
old = '    start = page * per_page\n'
new = '    start = (page - 1) * per_page\n'
assert old in src, "unexpected pages.py"
path.write_text(src.replace(old, new))
PY
