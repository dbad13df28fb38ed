import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

import pytest

from pages import page_count, paginate


def test_first_page():
    assert plain(paginate(list(range(25)), 1)) == plain(list(range(10)))


def test_last_page_is_partial():
    assert plain(paginate(list(range(25)), 3)) == [20, 21, 22, 23, 24]
    assert plain(paginate(list(range(25)), 4)) == []


def test_page_size():
    assert plain(paginate(list("abcdefg"), 2, per_page=3)) == ["d", "e", "f"]


def test_unchanged():
    assert plain(page_count(list(range(25)))) == 3
    with pytest.raises(ValueError):
        paginate([1], 0)
