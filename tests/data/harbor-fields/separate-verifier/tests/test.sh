#!/bin/bash
# Runs in tests/Dockerfile's image; of the agent's container it sees /logs/artifacts only.
if [ "$(cat /logs/artifacts/answer.txt 2>/dev/null)" = 42 ] && [ -f /etc/verifier-image ] && [ ! -e /app/scratch.txt ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "answer: '$(cat /logs/artifacts/answer.txt 2>/dev/null)'; verifier image: $(cat /etc/verifier-image 2>/dev/null); scratch: $(ls /app 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
