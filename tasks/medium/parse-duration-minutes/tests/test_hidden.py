import os
import sys

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

import pytest

from duration import parse_duration


def test_minutes():
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90m") == 5400
    assert parse_duration("1m1s") == 61


def test_unchanged():
    assert parse_duration("45s") == 45
    assert parse_duration("2H") == 7200
    with pytest.raises(ValueError):
        parse_duration("soon")
