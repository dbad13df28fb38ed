"""Comparison of semantic version strings (https://semver.org)."""

from __future__ import annotations

import functools
import re
from typing import Iterable

_VERSION_RE = re.compile(
    r"""
    ^v?
    (?P<core>(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*))
    (?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?
    (?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?
    $
    """,
    re.VERBOSE,
)


def _split(version: str) -> tuple[str, str]:
    """Validate ``version`` and return its (core, pre-release) parts.

    Build metadata is dropped: it never affects precedence.
    """
    match = _VERSION_RE.match(version.strip())
    if match is None:
        raise ValueError(f"not a semantic version: {version!r}")
    return match.group("core"), match.group("pre") or ""


def compare_versions(a: str, b: str) -> int:
    """Compare two version strings.

    Returns -1 if ``a`` has lower precedence than ``b``, 1 if higher and
    0 if they are equivalent.
    """
    core_a, _pre_a = _split(a)
    core_b, _pre_b = _split(b)
    if core_a == core_b:
        return 0
    return -1 if core_a < core_b else 1


def is_newer(candidate: str, current: str) -> bool:
    """True if ``candidate`` has higher precedence than ``current``."""
    return compare_versions(candidate, current) > 0


def sort_versions(versions: Iterable[str], reverse: bool = False) -> list[str]:
    """Return ``versions`` sorted by precedence (stable for equal versions)."""
    return sorted(versions, key=functools.cmp_to_key(compare_versions), reverse=reverse)


def latest(versions: Iterable[str]) -> str:
    """Return the version with the highest precedence.

    Raises ``ValueError`` if ``versions`` is empty.
    """
    ordered = sort_versions(versions)
    if not ordered:
        raise ValueError("latest() of an empty collection")
    return ordered[-1]
