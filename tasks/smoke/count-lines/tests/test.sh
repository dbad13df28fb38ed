#!/usr/bin/env bash
set -euo pipefail
cd "$WORKSPACE"
[ -f count.txt ] || { echo "count.txt is missing"; exit 1; }
[ "$(tr -d '[:space:]' < count.txt)" = "17" ] || { echo "count.txt has: $(head -c 100 count.txt)"; exit 1; }
