#!/usr/bin/env bash
set -euo pipefail
cd "$WORKSPACE"
"${PYTHON:-python3}" - <<'PY'
import calc
assert calc.add(2, 3) == 5, calc.add(2, 3)
assert calc.add(-4, 4) == 0
assert calc.add(0.5, 0.25) == 0.75
assert calc.mul(3, 4) == 12
PY
