#!/bin/bash
source /tests/lib.sh
echo "greeting.txt: '$(cat /app/greeting.txt 2>/dev/null)'"
reward test "$(cat /app/greeting.txt 2>/dev/null)" = Hello
