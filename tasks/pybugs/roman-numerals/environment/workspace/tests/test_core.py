import pytest

from numerals import from_roman, to_roman


@pytest.mark.parametrize(
    "number, numeral",
    [(1, "I"), (3, "III"), (6, "VI"), (15, "XV"), (2023, "MMXXIII"), (3000, "MMM")],
)
def test_to_roman_additive(number, numeral):
    assert to_roman(number) == numeral


def test_from_roman_simple():
    assert from_roman("MMXXIII") == 2023
    assert from_roman("  lxvi ") == 66


@pytest.mark.parametrize("bad", [0, -5, 4000])
def test_out_of_range(bad):
    with pytest.raises(ValueError):
        to_roman(bad)


def test_invalid_character():
    with pytest.raises(ValueError):
        from_roman("XIZ")
