"""Tokenizer for the filter-expression language.

Token kinds
-----------
``NUMBER``   integer or decimal literal; the value is an ``int`` or ``float``
``STRING``   double-quoted literal; the value is the text between the quotes,
             with the escapes ``\\"`` and ``\\\\`` resolved
``NAME``     identifier (field name or function name)
``KEYWORD``  one of :data:`KEYWORDS`
``OP``       operator or punctuation: ``== != <= >= < > && || ! + - * / % ( ) ,``

Whitespace between tokens is ignored.
"""

from __future__ import annotations

import re
from typing import List, NamedTuple, Union

KEYWORDS = frozenset({"true", "false", "null", "in"})


class Token(NamedTuple):
    """A single lexical token."""

    kind: str
    value: Union[str, int, float]


class TokenizeError(ValueError):
    """Raised when the input cannot be tokenized."""


_TOKEN_RE = re.compile(
    r"""
      (?P<NUMBER>\d+(?:\.\d+)?)
    | (?P<STRING>"[^"]*"?)          # be forgiving about a missing closing quote
    | (?P<NAME>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<OP>==|!=|<=|>=|&&|\|\||[-+*/%<>!(),])
    """,
    re.VERBOSE,
)


def _make_token(kind: str, text: str) -> Token:
    if kind == "NUMBER":
        return Token(kind, float(text) if "." in text else int(text))
    if kind == "STRING":
        return Token(kind, text.strip('"'))
    if kind == "NAME" and text in KEYWORDS:
        return Token("KEYWORD", text)
    return Token(kind, text)


def tokenize(source: str) -> List[Token]:
    """Split ``source`` into a list of :class:`Token`.

    >>> tokenize('status == "open"')
    [Token(kind='NAME', value='status'), Token(kind='OP', value='=='), Token(kind='STRING', value='open')]

    Raises :class:`TokenizeError` on characters that cannot start a token.
    """
    tokens: List[Token] = []
    for word in source.split():
        pos = 0
        while pos < len(word):
            match = _TOKEN_RE.match(word, pos)
            if match is None:
                raise TokenizeError(f"unexpected character {word[pos]!r} in {word!r}")
            tokens.append(_make_token(match.lastgroup, match.group()))
            pos = match.end()
    return tokens
