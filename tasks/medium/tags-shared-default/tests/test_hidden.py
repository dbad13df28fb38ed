import os
import sys

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

from tags import tag


def test_calls_do_not_share_a_list():
    assert tag("a") == ["a"]
    assert tag("b") == ["b"]
    assert tag("C ") == ["c"]


def test_given_list_is_extended_in_place():
    mine = ["x"]
    assert tag("Y", mine) is mine
    assert mine == ["x", "y"]
    assert tag("y", mine) == ["x", "y"]
