#!/usr/bin/env bash
# Reference fix: a None default and a new list per call, instead of one list shared by every call.
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("tags.py")
src = path.read_text()
old = 'def tag(name, tags=[]):\n    """Add ``name`` to ``tags`` (a new list when none is given) and return the list."""\n'
new = 'def tag(name, tags=None):\n    """Add ``name`` to ``tags`` (a new list when none is given) and return the list."""\n    if tags is None:\n        tags = []\n'
assert old in src, "unexpected tags.py"
path.write_text(src.replace(old, new))
PY
