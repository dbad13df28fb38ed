import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.insert(0, os.environ.get("WORKSPACE", "."))

from pytest import approx

from units import to_celsius, to_fahrenheit


def test_to_fahrenheit():
    assert plain(to_fahrenheit(100)) == approx(212)
    assert plain(to_fahrenheit(0)) == approx(32)
    assert plain(to_fahrenheit(37)) == approx(98.6)
    assert plain(to_fahrenheit(-40)) == approx(-40)


def test_round_trip():
    for c in (-10, 0, 21.5, 100):
        assert plain(to_celsius(to_fahrenheit(c))) == approx(c)
