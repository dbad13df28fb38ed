#!/bin/bash
out=$("${PYTHON:-python3}" /app/src/total.py "$DATA_FILE" 2>&1)
echo "total.py printed: $out (currency $TOTAL_CURRENCY, data $DATA_FILE)"
python_ok=$("${PYTHON:-python3}" /tests/check_source.py && echo yes)
if [ "$out" = "$EXPECTED_TOTAL" ] && [ "$python_ok" = yes ]; then
  echo '{"reward": 1.0, "output": 1.0}' > /logs/verifier/reward.json
else
  echo '{"reward": 0.0, "output": 0.0}' > /logs/verifier/reward.json
fi
