"""Calendar helpers: merge busy intervals and find free time slots."""

from .intervals import free_slots, merge_intervals, total_busy

__all__ = ["free_slots", "merge_intervals", "total_busy"]
__version__ = "0.2.0"
