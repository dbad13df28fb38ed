"""Query-string construction."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _format_value(value: Any) -> str:
    """Render a single parameter value as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def build_query(params: Mapping[str, Any] | None) -> str:
    """Build a query string (without the leading ``?``) from ``params``.

    ``None`` values are skipped, booleans become ``true``/``false`` and a
    list or tuple value repeats the key once per item.  Parameters keep
    their insertion order.
    """
    if not params:
        return ""
    flat: dict[str, str] = {}
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


def build_url(base: str, params: Mapping[str, Any] | None = None) -> str:
    """Append the query built from ``params`` to ``base``.

    If ``base`` already has a query string the new parameters are appended
    with ``&``.  ``base`` is returned unchanged when there is nothing to add.
    """
    query = build_query(params)
    if not query:
        return base
    if "?" not in base:
        return f"{base}?{query}"
    if base.endswith(("?", "&")):
        return base + query
    return f"{base}&{query}"
