import os
import sys

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

from calendar_util import days_in_year, is_leap


def test_centuries():
    assert not is_leap(1900)
    assert not is_leap(2100)
    assert is_leap(2000)
    assert is_leap(1600)


def test_ordinary_years():
    assert is_leap(2024) and not is_leap(2023)
    assert days_in_year(1900) == 365 and days_in_year(2000) == 366
