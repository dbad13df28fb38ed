#!/usr/bin/env bash
set -euo pipefail
# Collect (key, value) pairs (one per list item, so keys can repeat) and let
# urllib.parse.urlencode percent-encode keys and values.
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

p = Path("apiclient/query.py")
src = p.read_text()
old = '''    flat: dict[str, str] = {}
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            for item in value:
                if item is not None:
                    flat[key] = _format_value(item)
        else:
            flat[key] = _format_value(value)
    return "&".join(f"{key}={value}" for key, value in flat.items())
'''
new = '''    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            for item in value:
                if item is not None:
                    pairs.append((str(key), _format_value(item)))
        else:
            pairs.append((str(key), _format_value(value)))
    return urlencode(pairs)
'''
assert old in src, "unexpected query.py contents"
src = src.replace(old, new)
src = src.replace(
    "from typing import Any\n",
    "from typing import Any\nfrom urllib.parse import urlencode\n",
    1,
)
p.write_text(src)
PY
