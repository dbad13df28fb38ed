"""Settings loader.

Settings are plain nested dicts.  The built-in :data:`DEFAULTS` are combined
with the user's configuration (a TOML file and/or a dict of overrides) so
that a user only has to write the keys they want to change::

    # settings.toml
    [database]
    port = 6543

keeps every other ``database`` key (``host``, ``name``, ``pool``...) at its
default value.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any, Mapping

DEFAULTS: dict[str, Any] = {
    "debug": False,
    "database": {
        "host": "localhost",
        "port": 5432,
        "name": "app",
        "pool": {"min_size": 1, "max_size": 10, "timeout_s": 30},
    },
    "logging": {
        "level": "INFO",
        "handlers": ["console"],
        "format": "%(asctime)s %(levelname)s %(message)s",
    },
    "features": {},
}


def merge_settings(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``base`` updated with ``override``.

    Keys present in both are taken from ``override``; when both values are
    dicts they are merged key by key (recursively).  Any other value (lists
    included) from ``override`` replaces the one in ``base``.  Neither
    argument is modified.
    """
    result = dict(base)
    result.update(override)
    return result


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file into a dict."""
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def load_settings(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Build the effective settings.

    Starts from a copy of :data:`DEFAULTS`, merges the TOML file at ``path``
    (if given) and then ``overrides`` (if given) on top of it.
    """
    settings = copy.deepcopy(DEFAULTS)
    if path is not None:
        settings = merge_settings(settings, read_toml(path))
    if overrides:
        settings = merge_settings(settings, overrides)
    return settings
