"""Least-recently-used cache.

Entries are kept in an :class:`collections.OrderedDict` ordered from the
least recently used (first) to the most recently used (last).  Both a
successful :meth:`LRUCache.get` and a :meth:`LRUCache.put` count as a "use".
When the cache is full, inserting a new key evicts the least recently used
entry.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Callable, Hashable, Iterator

_MISSING = object()


class LRUCache:
    """A mapping with a fixed capacity that evicts the least recently used key."""

    def __init__(self, capacity: int = 128):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def get(self, key: Hashable, default: Any = None) -> Any:
        """Return the value for ``key`` (marking it as recently used) or ``default``."""
        value = self._data.get(key, _MISSING)
        if value is _MISSING:
            self.misses += 1
            return default
        self.hits += 1
        self._data.move_to_end(key, last=False)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        """Insert or update ``key``; evict the least recently used entry if full."""
        if key in self._data:
            self._data[key] = value
            self._data.move_to_end(key)
            return
        if len(self._data) >= self.capacity:
            self._data.popitem(last=False)
            self.evictions += 1
        self._data[key] = value

    def pop(self, key: Hashable, default: Any = _MISSING) -> Any:
        """Remove ``key`` and return its value (``KeyError`` if absent and no default)."""
        if default is _MISSING:
            return self._data.pop(key)
        return self._data.pop(key, default)

    def clear(self) -> None:
        """Remove every entry (statistics are kept)."""
        self._data.clear()

    def keys(self) -> list[Hashable]:
        """Keys from the least recently used to the most recently used."""
        return list(self._data)

    def __contains__(self, key: Hashable) -> bool:
        # Membership tests do not count as a use.
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.keys())

    def __repr__(self) -> str:
        return f"LRUCache(capacity={self.capacity}, size={len(self)})"


def memoize(capacity: int = 128) -> Callable[[Callable], Callable]:
    """Decorator caching a function's results by its positional arguments.

    The cache is available as ``wrapped.cache``.
    """

    def decorator(func: Callable) -> Callable:
        cache = LRUCache(capacity)

        @functools.wraps(func)
        def wrapper(*args):
            result = cache.get(args, _MISSING)
            if result is _MISSING:
                result = func(*args)
                cache.put(args, result)
            return result

        wrapper.cache = cache
        return wrapper

    return decorator
