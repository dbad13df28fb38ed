import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

import pytest

from stats import mean, median


def test_even_length():
    assert plain(median([1, 2, 3, 4])) == 2.5
    assert plain(median([4, 1])) == 2.5
    assert plain(median([7, 1, 3, 5])) == 4


def test_odd_length_unchanged():
    assert plain(median([3, 1, 2])) == 2
    assert plain(median([5])) == 5


def test_empty():
    with pytest.raises(ValueError):
        median([])
    assert plain(mean([1, 2])) == 1.5
