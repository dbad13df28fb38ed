"""Helpers for calling JSON HTTP APIs with the standard library."""

from .client import ApiClient
from .query import build_query, build_url

__all__ = ["ApiClient", "build_query", "build_url"]
__version__ = "0.9.2"
