"""Date helpers for reservations.

All public functions take ISO calendar dates as strings (``YYYY-MM-DD``).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

DATE_FORMAT = "%Y-%m-%d"
SECONDS_PER_DAY = 24 * 60 * 60


def parse_day(value: str) -> datetime:
    """Parse a ``YYYY-MM-DD`` string.

    Raises ``ValueError`` with a readable message for anything else.
    """
    try:
        return datetime.strptime(value, DATE_FORMAT)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid date {value!r}, expected YYYY-MM-DD") from exc


def nights_between(check_in: str, check_out: str) -> int:
    """Return the number of nights of a stay from ``check_in`` to ``check_out``.

    A guest arriving on the 10th and leaving on the 12th stays two nights.
    Raises ``ValueError`` if ``check_out`` is not after ``check_in``.
    """
    start = parse_day(check_in)
    end = parse_day(check_out)
    if end <= start:
        raise ValueError(
            f"check-out {check_out} must be after check-in {check_in}"
        )
    elapsed = end.timestamp() - start.timestamp()
    # A started day is billed as a full one, and the arrival day counts too.
    return math.ceil(elapsed / SECONDS_PER_DAY) + 1


def night_dates(check_in: str, check_out: str) -> list[str]:
    """Return the ISO date of every night of the stay, in order.

    The check-out day is not included: ``night_dates("2024-05-10",
    "2024-05-12")`` is ``["2024-05-10", "2024-05-11"]``.
    """
    start = parse_day(check_in)
    count = nights_between(check_in, check_out)
    return [(start + timedelta(days=i)).strftime(DATE_FORMAT) for i in range(count)]
