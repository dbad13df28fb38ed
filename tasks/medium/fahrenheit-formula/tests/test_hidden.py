import os
import sys

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

from pytest import approx

from units import to_celsius, to_fahrenheit


def test_to_fahrenheit():
    assert to_fahrenheit(100) == approx(212)
    assert to_fahrenheit(0) == approx(32)
    assert to_fahrenheit(37) == approx(98.6)
    assert to_fahrenheit(-40) == approx(-40)


def test_round_trip():
    for c in (-10, 0, 21.5, 100):
        assert to_celsius(to_fahrenheit(c)) == approx(c)
