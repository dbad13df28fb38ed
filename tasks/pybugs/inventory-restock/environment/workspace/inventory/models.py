"""Data types used by the inventory ledger."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


@dataclass
class Item:
    """One stock line: a SKU, a human-readable name and how many units we hold."""

    sku: str
    name: str
    quantity: int = 0
    discontinued: bool = False

    def __post_init__(self) -> None:
        if self.quantity < 0:
            raise ValueError("quantity cannot be negative")


class RestockLine(NamedTuple):
    """One row of a restock report."""

    sku: str
    name: str
    quantity: int
    shortfall: int
