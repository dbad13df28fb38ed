import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import pytest

from exprlex import Token, TokenizeError, tokenize


def kv(source):
    return [(t.kind, t.value) for t in tokenize(source)]


def test_string_with_space():
    assert plain(kv('name == "John Smith"')) == [
        ("NAME", "name"),
        ("OP", "=="),
        ("STRING", "John Smith"),
    ]


def test_string_whitespace_preserved_exactly():
    assert plain(kv('"  two  spaces\tand a tab  "')) == [("STRING", "  two  spaces\tand a tab  ")]


def test_escaped_quotes():
    assert plain(kv(r'title == "say \"hi\" now"')) == [
        ("NAME", "title"),
        ("OP", "=="),
        ("STRING", 'say "hi" now'),
    ]
    assert plain(kv(r'"a \"b\" c"')) == [("STRING", 'a "b" c')]
    assert plain(kv(r'"\"quoted\""')) == [("STRING", '"quoted"')]


def test_escaped_backslash_before_closing_quote():
    assert plain(kv(r'path == "C:\\temp\\" && x')) == [
        ("NAME", "path"),
        ("OP", "=="),
        ("STRING", "C:\\temp\\"),
        ("OP", "&&"),
        ("NAME", "x"),
    ]


def test_empty_and_adjacent_strings():
    assert plain(kv('""')) == [("STRING", "")]
    assert plain(kv('"a"+"b c"')) == [("STRING", "a"), ("OP", "+"), ("STRING", "b c")]
    assert plain(kv('f("", "x y",3)')) == [
        ("NAME", "f"),
        ("OP", "("),
        ("STRING", ""),
        ("OP", ","),
        ("STRING", "x y"),
        ("OP", ","),
        ("NUMBER", 3),
        ("OP", ")"),
    ]


def test_operators_and_keywords_inside_string_are_text():
    assert plain(kv('q == "a == b && true (c)"')) == [
        ("NAME", "q"),
        ("OP", "=="),
        ("STRING", "a == b && true (c)"),
    ]


def test_unterminated_string_raises():
    with pytest.raises(TokenizeError):
        tokenize('name == "abc')
    with pytest.raises(TokenizeError):
        tokenize('name == "John Smith')
    with pytest.raises(TokenizeError):
        tokenize(r'"ends with escaped quote\"')


def test_non_string_tokens_unchanged():
    assert plain(tokenize("  price >= 10.5\n&& qty != 3 || done == true ")) == plain([
        Token("NAME", "price"),
        Token("OP", ">="),
        Token("NUMBER", 10.5),
        Token("OP", "&&"),
        Token("NAME", "qty"),
        Token("OP", "!="),
        Token("NUMBER", 3),
        Token("OP", "||"),
        Token("NAME", "done"),
        Token("OP", "=="),
        Token("KEYWORD", "true"),
    ])
    assert plain(tokenize("")) == []
    with pytest.raises(TokenizeError):
        tokenize("a == @")
