import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

from calendar_util import days_in_year, is_leap


def test_centuries():
    assert not plain(is_leap(1900))
    assert not plain(is_leap(2100))
    assert plain(is_leap(2000))
    assert plain(is_leap(1600))


def test_ordinary_years():
    assert plain(is_leap(2024)) and not plain(is_leap(2023))
    assert plain(days_in_year(1900)) == 365 and plain(days_in_year(2000)) == 366
