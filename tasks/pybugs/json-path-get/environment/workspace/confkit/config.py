"""Loading and merging JSON configuration."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Dict, Iterable, Union

from .paths import get_path


def deep_merge(base: Dict[str, Any], override: Dict[str, Any]) -> Dict[str, Any]:
    """Return a new dict with ``override`` merged into ``base``.

    Nested dicts are merged recursively; any other value in ``override``
    (including lists) replaces the value in ``base``. Neither argument is
    modified.
    """
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def load(*paths: Union[str, Path]) -> "Config":
    """Load one or more JSON files, later files overriding earlier ones."""
    data: Dict[str, Any] = {}
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            data = deep_merge(data, json.load(fh))
    return Config(data)


class Config:
    """Read-only view over a parsed configuration tree."""

    def __init__(self, data: Dict[str, Any]) -> None:
        self._data = data

    @property
    def data(self) -> Dict[str, Any]:
        """The underlying parsed JSON data."""
        return self._data

    def get(self, path: str, default: Any = None) -> Any:
        """Look up a value by path, e.g. ``cfg.get("db.replicas[0].host")``.

        See :func:`confkit.paths.get_path` for the path syntax.
        """
        return get_path(self._data, path, default)

    def require(self, path: str) -> Any:
        """Like :meth:`get` but raise ``KeyError`` when the path is missing."""
        marker = object()
        value = get_path(self._data, path, marker)
        if value is marker:
            raise KeyError(path)
        return value

    def keys(self) -> Iterable[str]:
        """Top-level keys of the configuration."""
        return self._data.keys()
