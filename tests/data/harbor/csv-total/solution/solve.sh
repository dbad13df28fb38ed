#!/bin/bash
cat > /app/src/total.py <<'PY'
import csv
import sys


def total(path: str) -> float:
    with open(path, newline="") as fh:
        return sum(float(row["amount"]) for row in csv.DictReader(fh))


if __name__ == "__main__":
    print(f"{total(sys.argv[1]):.2f}")
PY
