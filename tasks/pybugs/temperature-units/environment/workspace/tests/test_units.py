import pytest

from weatherkit import Reading, convert, summarize


def test_celsius_fahrenheit():
    assert convert(100, "C", "F") == pytest.approx(212)
    assert convert(32, "F", "C") == pytest.approx(0)
    assert convert(-40, "celsius", "fahrenheit") == pytest.approx(-40)


def test_same_unit_is_identity():
    assert convert(12.5, "K", "kelvin") == 12.5


def test_reading_and_summary():
    assert Reading("x", 68, "F").to("C").value == pytest.approx(20)
    summary = summarize([Reading("a", 10), Reading("b", 20)], unit="F")
    assert summary == pytest.approx({"min": 50, "max": 68, "mean": 59})
    with pytest.raises(ValueError):
        summarize([])
