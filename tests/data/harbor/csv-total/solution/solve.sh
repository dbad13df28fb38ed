#!/bin/bash
[ "$DECIMALS" = 2 ] || { echo "[solution] env did not reach solve.sh" >&2; exit 1; }
cat > /app/src/total.py <<'PY'
import csv
import sys


def total(path: str) -> float:
    with open(path, newline="") as fh:
        return sum(float(row["amount"]) for row in csv.DictReader(fh))


if __name__ == "__main__":
    print(f"{total(sys.argv[1]):.2f}")
PY
