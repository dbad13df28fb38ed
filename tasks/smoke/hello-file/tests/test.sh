#!/usr/bin/env bash
set -euo pipefail
cd "$WORKSPACE"
[ -f hello.txt ] || { echo "hello.txt is missing"; exit 1; }
[ "$(cat hello.txt)" = "Hello, world!" ] || { echo "hello.txt has: $(head -c 200 hello.txt)"; exit 1; }
