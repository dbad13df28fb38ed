import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

from decimal import Decimal

import pytest

from invoicing import Invoice


def make(lines, tax_rate="0"):
    inv = Invoice("H-1", tax_rate=tax_rate)
    for price, qty in lines:
        inv.add_line("item", price, qty)
    return inv


def test_rounding_happens_on_the_sum_not_per_line():
    inv = make([("0.335", 1)] * 3)
    assert plain(inv.subtotal()) == plain(Decimal("1.01"))
    assert plain(inv.total()) == plain(Decimal("1.01"))


@pytest.mark.parametrize(
    "lines, expected",
    [
        ([("1.005", 1)], "1.01"),
        ([("2.675", 1)], "2.68"),
        ([("0.125", 1)], "0.13"),
        ([("3.33", "1.5")], "5.00"),
        ([("0.0125", 1000)], "12.50"),
        ([("0.0125", 3)], "0.04"),
        ([("0.333", 1)] * 3, "1.00"),
        ([("19.99", 3), ("0.005", 1)], "59.98"),
        ([("10.00", 1), ("-0.004", 1)], "10.00"),
    ],
)
def test_subtotal_half_up(lines, expected):
    assert plain(make(lines).subtotal()) == plain(Decimal(expected))


def test_tax_rounded_half_up():
    inv = make([("2.50", 1)], tax_rate="0.05")
    assert plain(inv.subtotal()) == plain(Decimal("2.50"))
    assert plain(inv.tax()) == plain(Decimal("0.13"))
    assert plain(inv.total()) == plain(Decimal("2.63"))


def test_tax_on_rounded_subtotal():
    # subtotal 1.005 -> 1.01; tax 1.01 * 0.5 = 0.505 -> 0.51
    inv = make([("0.335", 1)] * 3, tax_rate="0.5")
    assert plain(inv.subtotal()) == plain(Decimal("1.01"))
    assert plain(inv.tax()) == plain(Decimal("0.51"))
    assert plain(inv.total()) == plain(Decimal("1.52"))


def test_decimal_inputs_and_two_places():
    inv = make([(Decimal("0.335"), Decimal("3"))], tax_rate=Decimal("0.20"))
    sub, tax, total = inv.subtotal(), inv.tax(), inv.total()
    for value in (sub, tax, total):
        assert isinstance(value, Decimal)
        assert plain(value.as_tuple().exponent) == -2
    assert plain((str(sub), str(tax), str(total))) == ("1.01", "0.20", "1.21")


def test_summary_uses_fixed_amounts():
    inv = make([("0.335", 1)] * 3)
    assert "subtotal 1.01 EUR" in plain(inv.summary())
    assert "total 1.01 EUR" in plain(inv.summary())


def test_regular_invoice_unchanged():
    inv = Invoice("H-2", tax_rate="0.20")
    inv.add_line("Consulting (hours)", "85.00", "7.5")
    inv.add_line("Travel", "42.10")
    assert plain(inv.subtotal()) == plain(Decimal("679.60"))
    assert plain(inv.tax()) == plain(Decimal("135.92"))
    assert plain(inv.total()) == plain(Decimal("815.52"))
