import os
import sys

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

import pytest

from pages import page_count, paginate


def test_first_page():
    assert paginate(list(range(25)), 1) == list(range(10))


def test_last_page_is_partial():
    assert paginate(list(range(25)), 3) == [20, 21, 22, 23, 24]
    assert paginate(list(range(25)), 4) == []


def test_page_size():
    assert paginate(list("abcdefg"), 2, per_page=3) == ["d", "e", "f"]


def test_unchanged():
    assert page_count(list(range(25))) == 3
    with pytest.raises(ValueError):
        paginate([1], 0)
