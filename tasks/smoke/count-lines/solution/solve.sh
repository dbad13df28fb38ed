#!/usr/bin/env bash
set -euo pipefail
wc -l < data.txt | tr -d ' ' > count.txt
