import os
import sys

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import pytest  # noqa: E402

from tinystats import describe, median  # noqa: E402


def test_even_length():
    assert median([1, 2, 3, 4]) == 2.5
    assert median([4, 1, 3, 2]) == 2.5
    assert median([1, 3]) == 2
    assert median([-5, -1]) == -3
    assert median([0.5, 10.0, 1.5, 2.5]) == 2.0
    assert median([7, 7, 1, 100]) == 7


def test_odd_length_unsorted():
    assert median([5, 1, 3]) == 3
    assert median([9, -2, 4, 4, 0]) == 4
    assert median([42]) == 42


def test_input_not_modified():
    data = [5, 3, 9, 1, 7, 2]
    snapshot = list(data)
    assert median(data) == 4
    assert data == snapshot
    readings = [21.7, 21.5, 23.1, 22.0]
    summary = describe(readings)
    assert readings == [21.7, 21.5, 23.1, 22.0]
    assert summary["median"] == pytest.approx(21.85)


def test_other_sequences():
    assert median((3, 1, 2)) == 2
    assert median((8, 2, 6, 4)) == 5
    assert median(range(1, 11)) == 5.5


def test_empty_still_rejected():
    with pytest.raises(ValueError):
        median([])
    with pytest.raises(ValueError):
        median(())
