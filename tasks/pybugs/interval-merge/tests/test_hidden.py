import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import datetime as dt

import pytest

from agenda import free_slots, merge_intervals, total_busy


def merged(intervals):
    return [tuple(iv) for iv in merge_intervals(intervals)]


@pytest.mark.parametrize(
    "intervals, expected",
    [
        ([(1, 3), (3, 5)], [(1, 5)]),
        ([[1, 3], [3, 5]], [(1, 5)]),
        ([(6, 8), (1, 3), (2, 4)], [(1, 4), (6, 8)]),
        ([(5, 7), (1, 3), (3, 5)], [(1, 7)]),
        ([(2, 3), (1, 10)], [(1, 10)]),
        ([(4, 4), (4, 6), (1, 2)], [(1, 2), (4, 6)]),
        ([(3, 3), (1, 3)], [(1, 3)]),
        ([(1, 2), (2.5, 3)], [(1, 2), (2.5, 3)]),
        ([(10, 12), (0, 1), (5, 6), (1, 2)], [(0, 2), (5, 6), (10, 12)]),
        ([(1, 5), (1, 5), (1, 2)], [(1, 5)]),
        ([(7, 9)], [(7, 9)]),
    ],
)
def test_merge(intervals, expected):
    assert plain(merged(intervals)) == plain(expected)


def test_result_is_sorted_tuples():
    result = merge_intervals([[8, 9], [1, 2], [4, 5]])
    assert plain(result) == [(1, 2), (4, 5), (8, 9)]
    assert all(isinstance(iv, tuple) for iv in result)


def test_input_not_modified():
    data = [[6, 8], [1, 3], [3, 4]]
    snapshot = [list(iv) for iv in data]
    assert plain(merged(data)) == [(1, 4), (6, 8)]
    assert plain(data) == plain(snapshot)


def test_accepts_generator():
    gen = ((s, s + 1) for s in (5, 3, 1, 2))
    assert plain(merged(gen)) == [(1, 4), (5, 6)]


def test_datetimes_unsorted_and_touching():
    day = dt.datetime(2024, 3, 4)
    h = lambda hours: day + dt.timedelta(hours=hours)
    busy = [(h(14), h(15)), (h(9), h(10)), (h(10), h(11.5))]
    assert plain(merged(busy)) == plain([(h(9), h(11.5)), (h(14), h(15))])
    assert plain(total_busy(busy)) == plain(dt.timedelta(hours=3.5))


def test_free_slots_with_unsorted_busy():
    busy = [(13, 14), (9, 10), (9.5, 11)]
    assert plain(free_slots(busy, 8, 18)) == [(8, 9), (11, 13), (14, 18)]


def test_free_slots_back_to_back():
    busy = [(10, 11), (9, 10), (11, 12)]
    assert plain(free_slots(busy, 9, 13)) == [(12, 13)]


def test_total_busy_unsorted_overlap():
    assert plain(total_busy([(2, 4), (1, 3)])) == 3
    assert plain(total_busy([(3, 5), (1, 3)])) == 4


def test_invalid_interval_still_rejected():
    with pytest.raises(ValueError):
        merge_intervals([(1, 2), (5, 1)])
