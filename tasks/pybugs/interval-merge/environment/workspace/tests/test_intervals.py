import pytest

from agenda import free_slots, merge_intervals, total_busy


def test_merge_overlapping():
    assert merge_intervals([(1, 3), (2, 4), (6, 8)]) == [(1, 4), (6, 8)]


def test_merge_contained():
    assert merge_intervals([(1, 10), (2, 3), (4, 5)]) == [(1, 10)]


def test_merge_empty():
    assert merge_intervals([]) == []


def test_invalid_interval():
    with pytest.raises(ValueError):
        merge_intervals([(5, 1)])


def test_free_slots_and_total():
    busy = [(9, 10), (9.5, 11), (13, 14)]
    assert free_slots(busy, 8, 18) == [(8, 9), (11, 13), (14, 18)]
    assert total_busy(busy) == 3
