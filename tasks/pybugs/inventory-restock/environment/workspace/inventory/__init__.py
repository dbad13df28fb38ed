"""A small in-memory stock ledger for a warehouse."""

from .models import Item, RestockLine
from .store import Inventory, OutOfStockError, UnknownItemError

__all__ = ["Inventory", "Item", "OutOfStockError", "RestockLine", "UnknownItemError"]
__version__ = "0.4.0"
