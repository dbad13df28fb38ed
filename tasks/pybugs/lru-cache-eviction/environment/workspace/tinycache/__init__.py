"""A small, dependency-free LRU cache and a memoizing decorator built on it."""

from .lru import LRUCache, memoize

__all__ = ["LRUCache", "memoize"]
__version__ = "0.4.0"
