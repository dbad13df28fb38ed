"""Path-based lookups into nested JSON data."""

from __future__ import annotations

from typing import Any


def get_path(data: Any, path: str, default: Any = None) -> Any:
    """Return the value found by walking ``data`` along ``path``.

    ``path`` is a dotted list of dict keys, where each key may be followed by
    one or more ``[N]`` list indexes, for example::

        get_path(cfg, "servers[0].ports[1]")
        get_path(cfg, "logging.handlers.file.level")

    If any step is missing (unknown key, index out of range, or a value of
    the wrong type along the way), ``default`` is returned instead.
    """
    raise NotImplementedError("get_path is not implemented yet")
