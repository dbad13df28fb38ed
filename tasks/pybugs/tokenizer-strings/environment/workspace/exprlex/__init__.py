"""exprlex - a small lexer for filter expressions.

Used to turn user-supplied filter strings such as::

    status == "open" && priority >= 2

into a flat list of tokens that a parser can consume.
"""

from .tokenizer import KEYWORDS, Token, TokenizeError, tokenize

__all__ = ["KEYWORDS", "Token", "TokenizeError", "tokenize"]
__version__ = "1.2.0"
