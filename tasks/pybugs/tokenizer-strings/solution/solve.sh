#!/usr/bin/env bash
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
import pathlib

path = pathlib.Path("exprlex/tokenizer.py")
src = path.read_text()

start = src.index("_TOKEN_RE = re.compile(")
new_tail = r'''_TOKEN_RE = re.compile(
    r"""
      (?P<NUMBER>\d+(?:\.\d+)?)
    | (?P<NAME>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<OP>==|!=|<=|>=|&&|\|\||[-+*/%<>!(),])
    """,
    re.VERBOSE,
)

_ESCAPES = {'"': '"', "\\": "\\"}


def _make_token(kind: str, text: str) -> Token:
    if kind == "NUMBER":
        return Token(kind, float(text) if "." in text else int(text))
    if kind == "NAME" and text in KEYWORDS:
        return Token("KEYWORD", text)
    return Token(kind, text)


def _read_string(source: str, start: int):
    """Read a string literal whose opening quote is at ``start``.

    Returns ``(value, end)`` where ``end`` is the index just past the
    closing quote.
    """
    chars = []
    pos = start + 1
    while pos < len(source):
        ch = source[pos]
        if ch == "\\" and pos + 1 < len(source):
            nxt = source[pos + 1]
            if nxt in _ESCAPES:
                chars.append(_ESCAPES[nxt])
            else:
                chars.append(ch + nxt)
            pos += 2
            continue
        if ch == '"':
            return "".join(chars), pos + 1
        chars.append(ch)
        pos += 1
    raise TokenizeError(f"unterminated string literal starting at offset {start}")


def tokenize(source: str) -> List[Token]:
    """Split ``source`` into a list of :class:`Token`.

    >>> tokenize('status == "open"')
    [Token(kind='NAME', value='status'), Token(kind='OP', value='=='), Token(kind='STRING', value='open')]

    Raises :class:`TokenizeError` on characters that cannot start a token
    and on unterminated string literals.
    """
    tokens: List[Token] = []
    pos = 0
    while pos < len(source):
        ch = source[pos]
        if ch.isspace():
            pos += 1
            continue
        if ch == '"':
            value, pos = _read_string(source, pos)
            tokens.append(Token("STRING", value))
            continue
        match = _TOKEN_RE.match(source, pos)
        if match is None:
            raise TokenizeError(f"unexpected character {ch!r} at offset {pos}")
        tokens.append(_make_token(match.lastgroup, match.group()))
        pos = match.end()
    return tokens
'''
path.write_text(src[:start] + new_tail)
PY
