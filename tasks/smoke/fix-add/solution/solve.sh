#!/usr/bin/env bash
set -euo pipefail
sed -i 's/return a - b/return a + b/' calc.py
