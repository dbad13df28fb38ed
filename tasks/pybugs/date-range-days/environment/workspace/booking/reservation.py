"""The reservation record used by the front desk and invoicing."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from .dates import night_dates, nights_between, parse_day


@dataclass(frozen=True)
class Reservation:
    """A confirmed stay.

    ``check_in`` and ``check_out`` are ISO date strings; ``nightly_rate`` is
    the price of one night in the property's currency.
    """

    guest: str
    check_in: str
    check_out: str
    nightly_rate: Decimal

    def __post_init__(self) -> None:
        parse_day(self.check_in)
        parse_day(self.check_out)
        if self.nightly_rate < 0:
            raise ValueError("nightly_rate must not be negative")
        # validates the order of the two dates
        nights_between(self.check_in, self.check_out)

    @property
    def nights(self) -> int:
        """Number of nights billed for this reservation."""
        return nights_between(self.check_in, self.check_out)

    def night_dates(self) -> list[str]:
        """ISO dates of the nights of this stay."""
        return night_dates(self.check_in, self.check_out)

    def total(self) -> Decimal:
        """Total price of the stay (nights times nightly rate)."""
        return self.nightly_rate * self.nights
