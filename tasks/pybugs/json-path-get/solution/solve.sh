#!/usr/bin/env bash
set -euo pipefail
cat > confkit/paths.py <<'PY'
"""Path-based lookups into nested JSON data."""

from __future__ import annotations

import re
from typing import Any, List, Tuple, Union

_SEGMENT_RE = re.compile(r"^(?P<key>[^\[\]]*)(?P<indexes>(?:\[\d+\])*)$")
_INDEX_RE = re.compile(r"\[(\d+)\]")

_MISSING = object()


def _parse(path: str) -> List[Tuple[str, Union[str, int]]]:
    """Turn ``"a.b[2].c"`` into ``[("key", "a"), ("key", "b"), ("index", 2), ("key", "c")]``.

    Raises ``ValueError`` for malformed paths.
    """
    steps: List[Tuple[str, Union[str, int]]] = []
    for i, part in enumerate(path.split(".")):
        match = _SEGMENT_RE.match(part)
        if match is None:
            raise ValueError(f"malformed path segment {part!r} in {path!r}")
        key, indexes = match.group("key"), match.group("indexes")
        if key or not (i == 0 and indexes):
            steps.append(("key", key))
        for index in _INDEX_RE.findall(indexes):
            steps.append(("index", int(index)))
    return steps


def get_path(data: Any, path: str, default: Any = None) -> Any:
    """Return the value found by walking ``data`` along ``path``.

    ``path`` is a dotted list of dict keys, where each key may be followed by
    one or more ``[N]`` list indexes, for example::

        get_path(cfg, "servers[0].ports[1]")
        get_path(cfg, "logging.handlers.file.level")

    If any step is missing (unknown key, index out of range, or a value of
    the wrong type along the way), ``default`` is returned instead.
    """
    if path == "":
        return data
    try:
        steps = _parse(path)
    except ValueError:
        return default
    current = data
    for kind, step in steps:
        if kind == "key":
            if not isinstance(current, dict):
                return default
            current = current.get(step, _MISSING)
        else:
            if not isinstance(current, list) or step >= len(current):
                return default
            current = current[step]
        if current is _MISSING:
            return default
    return current
PY
