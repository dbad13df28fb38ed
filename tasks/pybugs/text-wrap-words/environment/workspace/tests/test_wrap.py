import pytest

from termfmt import boxed, wrap


def test_short_text_unchanged():
    assert wrap("hello world", 20) == "hello world"


def test_whitespace_normalised():
    assert wrap("  hello \t  world  ", 20) == "hello world"


def test_exact_fit():
    assert wrap("aaaa bbbb cccc", 4) == "aaaa\nbbbb\ncccc"


def test_invalid_width():
    with pytest.raises(ValueError):
        wrap("x", 0)


def test_box():
    assert boxed("hi there", 12) == (
        "+----------+\n"
        "| hi there |\n"
        "+----------+"
    )
