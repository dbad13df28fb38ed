"""Helpers for comparing semantic version strings."""

from .semver import compare_versions, is_newer, latest, sort_versions

__all__ = ["compare_versions", "is_newer", "latest", "sort_versions"]
__version__ = "2.1.3"
