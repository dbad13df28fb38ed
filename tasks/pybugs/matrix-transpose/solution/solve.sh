#!/usr/bin/env bash
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
import pathlib

path = pathlib.Path("linalg/matrix.py")
src = path.read_text()

old_t = "    return [[m[j][i] for j in range(rows)] for i in range(rows)]\n"
new_t = "    return [[m[j][i] for j in range(rows)] for i in range(cols)]\n"
assert old_t in src, "transpose body not found"
src = src.replace(old_t, new_t)

old_m = "    bt = transpose(b)\n"
new_m = (
    "    (n, k), (k2, _) = shape(a), shape(b)\n"
    "    if k != k2:\n"
    "        raise ValueError(\n"
    "            f\"matmul: shapes {shape(a)} and {shape(b)} are not aligned \"\n"
    "            f\"({k} columns vs {k2} rows)\"\n"
    "        )\n"
    "    bt = transpose(b)\n"
)
assert old_m in src, "matmul body not found"
src = src.replace(old_m, new_m)
path.write_text(src)
PY
