import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import pytest  # noqa: E402

from tinystats import describe, median  # noqa: E402


def test_even_length():
    assert plain(median([1, 2, 3, 4])) == 2.5
    assert plain(median([4, 1, 3, 2])) == 2.5
    assert plain(median([1, 3])) == 2
    assert plain(median([-5, -1])) == -3
    assert plain(median([0.5, 10.0, 1.5, 2.5])) == 2.0
    assert plain(median([7, 7, 1, 100])) == 7


def test_odd_length_unsorted():
    assert plain(median([5, 1, 3])) == 3
    assert plain(median([9, -2, 4, 4, 0])) == 4
    assert plain(median([42])) == 42


def test_input_not_modified():
    data = [5, 3, 9, 1, 7, 2]
    snapshot = list(data)
    assert plain(median(data)) == 4
    assert plain(data) == plain(snapshot)
    readings = [21.7, 21.5, 23.1, 22.0]
    summary = describe(readings)
    assert plain(readings) == [21.7, 21.5, 23.1, 22.0]
    assert plain(summary["median"]) == pytest.approx(21.85)


def test_other_sequences():
    assert plain(median((3, 1, 2))) == 2
    assert plain(median((8, 2, 6, 4))) == 5
    assert plain(median(range(1, 11))) == 5.5


def test_empty_still_rejected():
    with pytest.raises(ValueError):
        median([])
    with pytest.raises(ValueError):
        median(())
