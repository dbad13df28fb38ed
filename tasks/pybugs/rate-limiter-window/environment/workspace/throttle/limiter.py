"""A sliding-window rate limiter."""

from __future__ import annotations

import time
from collections import defaultdict, deque
from typing import Callable, Hashable


class SlidingWindowLimiter:
    """Allow at most ``max_calls`` calls per ``period`` seconds, per key.

    Every allowed call is recorded with its timestamp.  A call recorded at
    time ``t`` counts against the limit while ``now < t + period`` and stops
    counting once ``now >= t + period``.  Rejected calls are not recorded.

    ``clock`` is a zero-argument callable returning the current time in
    seconds (``time.monotonic`` by default); inject a fake one in tests.
    """

    def __init__(
        self,
        max_calls: int,
        period: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_calls < 1:
            raise ValueError("max_calls must be at least 1")
        if period <= 0:
            raise ValueError("period must be positive")
        self.max_calls = max_calls
        self.period = float(period)
        self._clock = clock
        self._hits: dict[Hashable, deque[float]] = defaultdict(deque)

    def _prune(self, hits: deque[float], now: float) -> None:
        """Drop timestamps that have left the window ending at ``now``."""
        cutoff = now - self.period
        while hits and hits[0] <= cutoff:
            hits.popleft()

    def allow(self, key: Hashable = "default") -> bool:
        """Record a call for ``key`` and return True if it is within the limit."""
        hits = self._hits[key]
        if len(hits) >= self.max_calls:
            return False
        now = self._clock()
        self._prune(hits, now)
        hits.append(now)
        return True

    def remaining(self, key: Hashable = "default") -> int:
        """How many more calls ``key`` may make right now."""
        return max(0, self.max_calls - len(self._hits[key]))

    def retry_after(self, key: Hashable = "default") -> float:
        """Seconds until ``key`` may call again (0.0 if it may call now)."""
        hits = self._hits[key]
        if len(hits) < self.max_calls:
            return 0.0
        return max(0.0, hits[0] + self.period - self._clock())

    def reset(self, key: Hashable | None = None) -> None:
        """Forget recorded calls for ``key``, or for every key if None."""
        if key is None:
            self._hits.clear()
        else:
            self._hits.pop(key, None)
