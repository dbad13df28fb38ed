import os
import sys

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

from search import find


def test_every_element_is_found():
    items = [1, 3, 5, 7, 9, 11]
    for i, x in enumerate(items):
        assert find(items, x) == i
    assert find([5], 5) == 0


def test_missing():
    assert find([1, 3, 5], 4) == -1
    assert find([1, 3, 5], 6) == -1
    assert find([], 1) == -1
