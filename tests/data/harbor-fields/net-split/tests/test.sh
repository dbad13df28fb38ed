#!/bin/bash
# The agent ran without network (loopback only); the verifier has the network Harbor gives it
# by default (an interface besides lo). Interfaces are read, no traffic is sent.
verifier=$(awk -F: 'NR > 2 { gsub(/ /, "", $1); print $1 }' /proc/net/dev | grep -vx lo | head -1)
if [ "$(cat /app/interfaces.txt 2>/dev/null)" = lo ] && [ -n "$verifier" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "agent's interfaces: $(cat /app/interfaces.txt 2>/dev/null | tr '\n' ' '); verifier's besides lo: '$verifier'"
  echo 0 > /logs/verifier/reward.txt
fi
