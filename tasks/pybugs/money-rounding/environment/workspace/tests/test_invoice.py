from decimal import Decimal

from invoicing import Invoice, LineItem, format_money


def test_simple_invoice():
    inv = Invoice("T-1", tax_rate="0.20")
    inv.add_line("Consulting (hours)", "85.00", "7.5")
    inv.add_line("Travel", "42.10")
    assert inv.subtotal() == Decimal("679.60")
    assert inv.tax() == Decimal("135.92")
    assert inv.total() == Decimal("815.52")


def test_empty_invoice():
    inv = Invoice("T-2")
    assert inv.total() == Decimal("0.00")


def test_line_item_converts_inputs():
    item = LineItem("Box", "3.50", 2)
    assert item.unit_price == Decimal("3.50")
    assert item.quantity == Decimal(2)


def test_format_money():
    assert format_money(Decimal("5")) == "5.00 EUR"
    assert format_money(Decimal("12.3"), "USD") == "12.30 USD"
