"""Small invoicing helpers: line items, invoices and money formatting."""

from .core import Invoice, LineItem, format_money, to_decimal

__all__ = ["Invoice", "LineItem", "format_money", "to_decimal"]
__version__ = "0.3.1"
