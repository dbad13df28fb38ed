#!/usr/bin/env bash
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("tinycache/lru.py")
src = path.read_text()
old = "        self._data.move_to_end(key, last=False)\n"
assert old in src, "patch did not apply"
# The most recently used entry belongs at the end of the OrderedDict.
src = src.replace(old, "        self._data.move_to_end(key)\n", 1)
path.write_text(src)
PY
