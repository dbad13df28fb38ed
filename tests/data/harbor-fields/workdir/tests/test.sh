#!/bin/bash
if [ "$(cat /srv/project/count.txt 2>/dev/null)" = 3 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "count.txt holds '$(cat /srv/project/count.txt 2>/dev/null)'; expected 3"
  echo 0 > /logs/verifier/reward.txt
fi
