import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import pytest  # noqa: E402

from numerals import from_roman, to_roman  # noqa: E402


@pytest.mark.parametrize(
    "number, numeral",
    [
        (4, "IV"),
        (9, "IX"),
        (14, "XIV"),
        (40, "XL"),
        (42, "XLII"),
        (90, "XC"),
        (400, "CD"),
        (900, "CM"),
        (1994, "MCMXCIV"),
        (2024, "MMXXIV"),
        (444, "CDXLIV"),
        (3999, "MMMCMXCIX"),
    ],
)
def test_to_roman_subtractive(number, numeral):
    assert plain(to_roman(number)) == plain(numeral)


@pytest.mark.parametrize(
    "numeral, number",
    [
        ("IV", 4),
        ("IX", 9),
        ("XLII", 42),
        ("XCIX", 99),
        ("CDXLIV", 444),
        ("MCMXCIV", 1994),
        ("mcmxciv", 1994),
        ("MMMCMXCIX", 3999),
    ],
)
def test_from_roman_subtractive(numeral, number):
    assert plain(from_roman(numeral)) == plain(number)


def test_round_trip_full_range():
    for n in range(1, 4000):
        numeral = to_roman(n)
        assert plain(from_roman(numeral)) == plain(n), (n, numeral)


def test_additive_forms_still_work():
    assert plain(to_roman(2023)) == "MMXXIII"
    assert plain(from_roman("MMXXIII")) == 2023
    assert plain(from_roman(" viii ")) == 8


def test_errors_preserved():
    for bad in (0, 4000, -1):
        with pytest.raises(ValueError):
            to_roman(bad)
    with pytest.raises(ValueError):
        from_roman("ABC")
    with pytest.raises(ValueError):
        from_roman("")
