#!/usr/bin/env bash
set -euo pipefail
cd "$WORKSPACE"
"${PYTHON:-python3}" - <<'PY'
from harness_checks import plain
import calc
assert plain(calc.add(2, 3)) == 5, calc.add(2, 3)
assert plain(calc.add(-4, 4)) == 0
assert plain(calc.add(0.5, 0.25)) == 0.75
assert plain(calc.mul(3, 4)) == 12
PY
