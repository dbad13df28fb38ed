import pytest

from inventory import Inventory, OutOfStockError, UnknownItemError


def make_inventory():
    inv = Inventory()
    inv.add("A-1", "Bolts", 120)
    inv.add("N-2", "Nuts", 80)
    return inv


def test_add_and_get():
    inv = make_inventory()
    inv.add("A-1", "Bolts", 5)
    assert inv.get("A-1").quantity == 125
    assert len(inv) == 2
    assert "N-2" in inv


def test_remove():
    inv = make_inventory()
    inv.remove("N-2", 30)
    assert inv.get("N-2").quantity == 50
    with pytest.raises(OutOfStockError):
        inv.remove("N-2", 51)


def test_unknown_sku():
    with pytest.raises(UnknownItemError):
        make_inventory().get("Z-9")


def test_total_units_and_discontinue():
    inv = make_inventory()
    assert inv.total_units() == 200
    inv.discontinue("A-1")
    assert inv.get("A-1").discontinued
