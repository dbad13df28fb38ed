"""Core invoice model.

Prices, quantities and tax rates may be given as strings (``"19.99"``),
integers or :class:`decimal.Decimal` instances.  Every monetary amount
returned by :class:`Invoice` is a ``Decimal`` with exactly two decimal
places.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

CENT = Decimal("0.01")


def to_decimal(value) -> Decimal:
    """Convert a price, quantity or rate to ``Decimal`` without losing digits."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, float):
        # repr() gives the shortest string that round-trips, e.g. "0.1".
        return Decimal(repr(value))
    return Decimal(str(value))


def format_money(amount: Decimal, currency: str = "EUR") -> str:
    """Format an amount for display, e.g. ``format_money(Decimal("5")) -> "5.00 EUR"``."""
    return f"{to_decimal(amount).quantize(CENT)} {currency}"


@dataclass
class LineItem:
    """One line of an invoice: ``quantity`` units at ``unit_price`` each."""

    description: str
    unit_price: Decimal
    quantity: Decimal = Decimal(1)

    def __post_init__(self) -> None:
        self.unit_price = to_decimal(self.unit_price)
        self.quantity = to_decimal(self.quantity)

    def amount(self) -> Decimal:
        """Amount of this line: ``unit_price * quantity``."""
        value = round(float(self.unit_price) * float(self.quantity), 2)
        return Decimal(str(value)).quantize(CENT)


@dataclass
class Invoice:
    """An invoice made of line items, with an optional tax rate (``"0.2"`` = 20 %)."""

    number: str
    tax_rate: Decimal = Decimal(0)
    lines: list[LineItem] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tax_rate = to_decimal(self.tax_rate)

    def add_line(self, description: str, unit_price, quantity=1) -> LineItem:
        """Append a line item and return it."""
        item = LineItem(description, unit_price, quantity)
        self.lines.append(item)
        return item

    def subtotal(self) -> Decimal:
        """Sum of all lines before tax."""
        return sum((item.amount() for item in self.lines), Decimal(0)).quantize(CENT)

    def tax(self) -> Decimal:
        """Tax on the subtotal."""
        value = round(float(self.subtotal()) * float(self.tax_rate), 2)
        return Decimal(str(value)).quantize(CENT)

    def total(self) -> Decimal:
        """Subtotal plus tax."""
        return self.subtotal() + self.tax()

    def summary(self) -> str:
        """A short human-readable summary of the invoice."""
        return (
            f"Invoice {self.number}: {len(self.lines)} line(s), "
            f"subtotal {format_money(self.subtotal())}, "
            f"tax {format_money(self.tax())}, "
            f"total {format_money(self.total())}"
        )
