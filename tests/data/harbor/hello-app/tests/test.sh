#!/bin/bash
# Harbor runs this in the container after the agent; /tests holds this directory.
"${PYTHON:-python3}" -m pytest /tests/test_state.py -rA -p no:cacheprovider

if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
