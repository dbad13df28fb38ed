#!/usr/bin/env bash
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("appsettings/loader.py")
src = path.read_text()
old = '''    result = dict(base)
    result.update(override)
    return result
'''
new = '''    result = dict(base)
    for key, value in override.items():
        current = result.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            result[key] = merge_settings(current, value)
        else:
            result[key] = value
    return result
'''
assert old in src, "patch did not apply"
path.write_text(src.replace(old, new, 1))
PY
