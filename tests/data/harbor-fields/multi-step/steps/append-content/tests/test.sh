#!/bin/bash
source /tests/lib.sh
echo "greeting.txt: $(tr '\n' '|' < /app/greeting.txt 2>/dev/null)"
check() {
  [ -f /app/.setup-done ] && [ "$(wc -l < /app/greeting.txt)" = "$EXPECTED_LINES" ] &&
    [ "$(sed -n 1p /app/greeting.txt)" = Hello ] && [ "$(sed -n 2p /app/greeting.txt)" = World ]
}
reward check
