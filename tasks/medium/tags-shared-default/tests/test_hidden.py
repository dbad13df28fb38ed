import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

from tags import tag


def test_calls_do_not_share_a_list():
    assert plain(tag("a")) == ["a"]
    assert plain(tag("b")) == ["b"]
    assert plain(tag("C ")) == ["c"]


def test_given_list_is_extended_in_place():
    mine = ["x"]
    assert tag("Y", mine) is mine
    assert plain(mine) == ["x", "y"]
    assert plain(tag("y", mine)) == ["x", "y"]
