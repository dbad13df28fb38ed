"""Interval arithmetic for calendars.

An interval is a ``(start, end)`` pair with ``start <= end``; it covers the
closed range from ``start`` to ``end``.  Bounds can be numbers (minutes since
midnight, hours, ...) or any other comparable values such as
:class:`datetime.datetime`.
"""

from __future__ import annotations

from typing import Iterable, Sequence, TypeVar

T = TypeVar("T")

Interval = tuple[T, T]


def _check(interval: Sequence[T]) -> Interval:
    start, end = interval
    if end < start:
        raise ValueError(f"interval ends before it starts: {interval!r}")
    return (start, end)


def merge_intervals(intervals: Iterable[Sequence[T]]) -> list[Interval]:
    """Merge overlapping or touching intervals.

    ``intervals`` may be given in any order; the input is not modified.
    Returns a new list of ``(start, end)`` tuples sorted by start, in which
    no two intervals overlap or touch.

    >>> merge_intervals([(1, 3), (2, 4), (6, 8)])
    [(1, 4), (6, 8)]
    """
    merged: list[Interval] = []
    for interval in intervals:
        start, end = _check(interval)
        if merged and start < merged[-1][1]:
            last_start, last_end = merged[-1]
            merged[-1] = (last_start, max(last_end, end))
        else:
            merged.append((start, end))
    return merged


def total_busy(intervals: Iterable[Sequence[T]]):
    """Total length covered by ``intervals`` (overlaps are counted once)."""
    merged = merge_intervals(intervals)
    if not merged:
        return 0
    total = merged[0][1] - merged[0][0]
    for start, end in merged[1:]:
        total = total + (end - start)
    return total


def free_slots(busy: Iterable[Sequence[T]], day_start: T, day_end: T) -> list[Interval]:
    """Free ``(start, end)`` slots between ``day_start`` and ``day_end``.

    Busy intervals are clipped to the day; zero-length gaps are not reported.
    """
    slots: list[Interval] = []
    cursor = day_start
    for start, end in merge_intervals(busy):
        if end <= day_start or start >= day_end:
            continue
        if start > cursor:
            slots.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < day_end:
        slots.append((cursor, day_end))
    return slots
