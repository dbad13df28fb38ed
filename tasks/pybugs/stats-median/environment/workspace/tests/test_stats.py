import math

import pytest

from tinystats import describe, mean, median, mode, stdev, variance


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_median_odd():
    assert median([1, 2, 3]) == 2
    assert median([10]) == 10


def test_mode_first_tie_wins():
    assert mode(["b", "a", "a", "b"]) == "b"


def test_variance_and_stdev():
    assert variance([2, 4, 4, 4, 5, 5, 7, 9], sample=False) == 4
    assert math.isclose(stdev([2, 4, 4, 4, 5, 5, 7, 9], sample=False), 2.0)


def test_empty_rejected():
    for fn in (mean, median, mode):
        with pytest.raises(ValueError):
            fn([])


def test_describe_keys():
    assert set(describe([1, 2, 3])) == {"count", "min", "max", "mean", "median", "stdev"}
