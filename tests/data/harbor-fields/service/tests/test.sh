#!/bin/bash
# The service is up again for the tests (the container restarted: its entrypoint ran again).
live=$(wget -q -O - http://127.0.0.1:8080/status 2>/dev/null)
if [ "$(cat /app/status.txt 2>/dev/null)" = up ] && [ "$live" = up ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "status.txt: '$(cat /app/status.txt 2>/dev/null)', service now: '$live'"
  echo 0 > /logs/verifier/reward.txt
fi
