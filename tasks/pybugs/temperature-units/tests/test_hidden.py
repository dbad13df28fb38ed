import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import itertools

import pytest

from weatherkit import Reading, convert, summarize

# The same temperatures expressed in C, F and K.
EQUIVALENTS = [
    {"C": 0.0, "F": 32.0, "K": 273.15},
    {"C": 100.0, "F": 212.0, "K": 373.15},
    {"C": -273.15, "F": -459.67, "K": 0.0},
    {"C": -40.0, "F": -40.0, "K": 233.15},
    {"C": 26.85, "F": 80.33, "K": 300.0},
    {"C": 37.0, "F": 98.6, "K": 310.15},
]


@pytest.mark.parametrize("temps", EQUIVALENTS)
def test_all_directions(temps):
    for src, dst in itertools.product("CFK", repeat=2):
        assert plain(convert(temps[src], src, dst)) == pytest.approx(temps[dst], abs=1e-9), (src, dst)


def test_kelvin_examples_from_issue():
    assert plain(convert(0, "C", "K")) == pytest.approx(273.15)
    assert plain(convert(300, "K", "C")) == pytest.approx(26.85)
    assert plain(convert(273.15, "K", "F")) == pytest.approx(32.0)
    assert plain(convert(0, "K", "F")) == pytest.approx(-459.67)
    assert plain(convert(32, "F", "K")) == pytest.approx(273.15)


def test_names_and_case_insensitivity():
    assert plain(convert(0, "celsius", "kelvin")) == pytest.approx(273.15)
    assert plain(convert(373.15, "Kelvin", "FAHRENHEIT")) == pytest.approx(212.0)
    assert plain(convert(212, "f", "k")) == pytest.approx(373.15)
    assert plain(convert(5, " K ", "k")) == pytest.approx(5)


def test_round_trip():
    for value in (-300.0, -12.5, 0.0, 1.0, 451.0, 5778.0):
        for a, b in itertools.permutations("CFK", 2):
            assert plain(convert(convert(value, a, b), b, a)) == pytest.approx(value, abs=1e-9)


@pytest.mark.parametrize(
    "src,dst,bad",
    [("Celcius", "F", "Celcius"), ("C", "rankine", "rankine"), ("X", "X", "X"), ("", "C", None)],
)
def test_unknown_units_raise(src, dst, bad):
    with pytest.raises(ValueError) as excinfo:
        convert(25, src, dst)
    if bad is not None:
        assert plain(bad) in str(excinfo.value)


def test_reading_and_summary_use_kelvin_correctly():
    assert plain(Reading("lab", 300, "K").to("C").value) == pytest.approx(26.85)
    summary = summarize([Reading("a", 273.15, "K"), Reading("b", 373.15, "K")], unit="F")
    assert plain(summary) == pytest.approx({"min": 32.0, "max": 212.0, "mean": 122.0})
    with pytest.raises(ValueError):
        Reading("lab", 1, "Q").to("C")
