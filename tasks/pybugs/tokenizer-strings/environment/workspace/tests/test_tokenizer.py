import pytest

from exprlex import Token, TokenizeError, tokenize


def kinds_values(source):
    return [(t.kind, t.value) for t in tokenize(source)]


def test_numbers_names_and_operators():
    assert kinds_values("priority >= 2 && score < 0.5") == [
        ("NAME", "priority"),
        ("OP", ">="),
        ("NUMBER", 2),
        ("OP", "&&"),
        ("NAME", "score"),
        ("OP", "<"),
        ("NUMBER", 0.5),
    ]


def test_keywords_and_parentheses():
    assert kinds_values("(done==false)||x in y") == [
        ("OP", "("),
        ("NAME", "done"),
        ("OP", "=="),
        ("KEYWORD", "false"),
        ("OP", ")"),
        ("OP", "||"),
        ("NAME", "x"),
        ("KEYWORD", "in"),
        ("NAME", "y"),
    ]


def test_simple_string():
    assert tokenize('status == "open"') == [
        Token("NAME", "status"),
        Token("OP", "=="),
        Token("STRING", "open"),
    ]


def test_bad_character():
    with pytest.raises(TokenizeError):
        tokenize("a == #")
