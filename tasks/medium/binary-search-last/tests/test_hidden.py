import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

from search import find


def test_every_element_is_found():
    items = [1, 3, 5, 7, 9, 11]
    for i, x in enumerate(items):
        assert plain(find(items, x)) == plain(i)
    assert plain(find([5], 5)) == 0


def test_missing():
    assert plain(find([1, 3, 5], 4)) == -1
    assert plain(find([1, 3, 5], 6)) == -1
    assert plain(find([], 1)) == -1
