#!/usr/bin/env bash
set -euo pipefail
cd "$WORKSPACE"
"${PYTHON:-python3}" -m pytest -q -p no:cacheprovider "$TESTS_DIR"
