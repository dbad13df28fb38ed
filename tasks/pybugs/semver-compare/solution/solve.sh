#!/usr/bin/env bash
# Reference fix: compare the version core numerically and implement the
# SemVer 2.0.0 pre-release precedence rules (spec item 11).
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("versiontools/semver.py")
src = path.read_text()

old = '''    core_a, _pre_a = _split(a)
    core_b, _pre_b = _split(b)
    if core_a == core_b:
        return 0
    return -1 if core_a < core_b else 1
'''
new = '''    core_a, pre_a = _split(a)
    core_b, pre_b = _split(b)
    key_a = tuple(int(part) for part in core_a.split("."))
    key_b = tuple(int(part) for part in core_b.split("."))
    if key_a != key_b:
        return -1 if key_a < key_b else 1
    return _compare_prerelease(pre_a, pre_b)


def _compare_identifiers(x: str, y: str) -> int:
    """Compare two dot-separated pre-release identifiers."""
    x_num, y_num = x.isdigit(), y.isdigit()
    if x_num and y_num:
        a, b = int(x), int(y)
    elif x_num or y_num:
        # numeric identifiers have lower precedence than alphanumeric ones
        return -1 if x_num else 1
    else:
        a, b = x, y
    if a == b:
        return 0
    return -1 if a < b else 1


def _compare_prerelease(pre_a: str, pre_b: str) -> int:
    """Compare pre-release strings; "" (a normal release) ranks highest."""
    if pre_a == pre_b:
        return 0
    if not pre_a:
        return 1
    if not pre_b:
        return -1
    ids_a, ids_b = pre_a.split("."), pre_b.split(".")
    for x, y in zip(ids_a, ids_b):
        result = _compare_identifiers(x, y)
        if result:
            return result
    if len(ids_a) == len(ids_b):
        return 0
    return -1 if len(ids_a) < len(ids_b) else 1
'''
if new not in src:
    assert old in src, "unexpected versiontools/semver.py"
    src = src.replace(old, new)
path.write_text(src)
PY
