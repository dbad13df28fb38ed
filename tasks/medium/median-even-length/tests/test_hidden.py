import os
import sys

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

import pytest

from stats import mean, median


def test_even_length():
    assert median([1, 2, 3, 4]) == 2.5
    assert median([4, 1]) == 2.5
    assert median([7, 1, 3, 5]) == 4


def test_odd_length_unchanged():
    assert median([3, 1, 2]) == 2
    assert median([5]) == 5


def test_empty():
    with pytest.raises(ValueError):
        median([])
    assert mean([1, 2]) == 1.5
