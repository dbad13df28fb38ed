"""The in-memory inventory ledger."""

from __future__ import annotations

from .models import Item, RestockLine


class UnknownItemError(KeyError):
    """Raised when a SKU is not in the inventory."""


class OutOfStockError(ValueError):
    """Raised when removing more units than are in stock."""


class Inventory:
    """A collection of :class:`Item` objects keyed by SKU."""

    def __init__(self) -> None:
        self._items: dict[str, Item] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, sku: object) -> bool:
        return sku in self._items

    def items(self) -> list[Item]:
        """All items, in insertion order."""
        return list(self._items.values())

    def get(self, sku: str) -> Item:
        """Return the item for ``sku`` or raise :class:`UnknownItemError`."""
        try:
            return self._items[sku]
        except KeyError:
            raise UnknownItemError(sku) from None

    def add(self, sku: str, name: str, quantity: int = 0) -> None:
        """Register a new item, or add ``quantity`` units to an existing one."""
        if quantity < 0:
            raise ValueError("quantity cannot be negative")
        if sku in self._items:
            self._items[sku].quantity += quantity
        else:
            self._items[sku] = Item(sku=sku, name=name, quantity=quantity)

    def remove(self, sku: str, quantity: int) -> None:
        """Take ``quantity`` units of ``sku`` out of stock."""
        item = self.get(sku)
        if quantity < 0:
            raise ValueError("quantity cannot be negative")
        if quantity > item.quantity:
            raise OutOfStockError(
                f"cannot remove {quantity} x {sku}: only {item.quantity} in stock"
            )
        item.quantity -= quantity

    def discontinue(self, sku: str) -> None:
        """Mark ``sku`` as discontinued; it stays in the ledger but is not reordered."""
        self.get(sku).discontinued = True

    def total_units(self) -> int:
        """Total number of units across all items."""
        return sum(item.quantity for item in self._items.values())

    def restock_report(self, threshold: int) -> list[RestockLine]:
        """List the items that need restocking.

        Items whose quantity is below ``threshold`` are reported with their
        shortfall (``threshold - quantity``).
        """
        raise NotImplementedError("restock_report is not implemented yet")
