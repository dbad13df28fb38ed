"""Reservation helpers: stay length, nightly breakdown and pricing."""

from .dates import night_dates, nights_between, parse_day
from .reservation import Reservation

__all__ = ["Reservation", "night_dates", "nights_between", "parse_day"]
__version__ = "1.4.0"
