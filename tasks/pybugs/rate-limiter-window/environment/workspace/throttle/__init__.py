"""In-process sliding-window rate limiting."""

from .limiter import SlidingWindowLimiter

__all__ = ["SlidingWindowLimiter"]
__version__ = "1.2.0"
