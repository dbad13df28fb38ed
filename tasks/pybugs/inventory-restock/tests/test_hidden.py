import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import pytest  # noqa: E402

from inventory import Inventory, RestockLine  # noqa: E402


def warehouse():
    inv = Inventory()
    inv.add("B-7", "washers", 8)
    inv.add("A-1", "Bolts", 3)
    inv.add("N-2", "Nuts", 3)
    inv.add("S-9", "Screws", 40)
    return inv


def test_example_from_issue():
    report = warehouse().restock_report(10)
    assert plain(report) == plain([
        RestockLine(sku="A-1", name="Bolts", quantity=3, shortfall=7),
        RestockLine(sku="N-2", name="Nuts", quantity=3, shortfall=7),
        RestockLine(sku="B-7", name="washers", quantity=8, shortfall=2),
    ])
    assert all(isinstance(line, RestockLine) for line in report)
    assert plain(report[0].shortfall) == 7


def test_strictly_below_threshold():
    inv = Inventory()
    inv.add("X", "Exactly", 10)
    inv.add("Y", "Below", 9)
    inv.add("Z", "Above", 11)
    assert plain(inv.restock_report(10)) == [("Y", "Below", 9, 1)]


def test_sorted_by_shortfall_desc_then_name_case_insensitive():
    inv = Inventory()
    inv.add("1", "zinc plates", 5)
    inv.add("2", "Anchors", 5)
    inv.add("3", "brackets", 5)
    inv.add("4", "Clamps", 0)
    inv.add("5", "dowels", 9)
    report = inv.restock_report(10)
    assert plain([line.name for line in report]) == [
        "Clamps",
        "Anchors",
        "brackets",
        "zinc plates",
        "dowels",
    ]
    assert plain([line.shortfall for line in report]) == [10, 5, 5, 5, 1]


def test_discontinued_items_excluded():
    inv = warehouse()
    inv.discontinue("A-1")
    assert plain([line.sku for line in inv.restock_report(10)]) == ["N-2", "B-7"]


def test_zero_threshold_and_empty_inventory():
    assert plain(warehouse().restock_report(0)) == []
    assert plain(Inventory().restock_report(100)) == []


def test_negative_threshold_rejected():
    with pytest.raises(ValueError):
        warehouse().restock_report(-1)


def test_report_is_read_only_and_reflects_changes():
    inv = warehouse()
    before = [(i.sku, i.quantity, i.discontinued) for i in inv.items()]
    inv.restock_report(50)
    inv.restock_report(50)
    assert plain([(i.sku, i.quantity, i.discontinued) for i in inv.items()]) == plain(before)
    inv.remove("S-9", 35)
    inv.add("A-1", "Bolts", 20)
    assert plain(inv.restock_report(10)) == [
        ("N-2", "Nuts", 3, 7),
        ("S-9", "Screws", 5, 5),
        ("B-7", "washers", 8, 2),
    ]
