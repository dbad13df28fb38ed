import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

import pytest

from duration import parse_duration


def test_minutes():
    assert plain(parse_duration("1h30m")) == 5400
    assert plain(parse_duration("90m")) == 5400
    assert plain(parse_duration("1m1s")) == 61


def test_unchanged():
    assert plain(parse_duration("45s")) == 45
    assert plain(parse_duration("2H")) == 7200
    with pytest.raises(ValueError):
        parse_duration("soon")
