#!/usr/bin/env bash
set -euo pipefail
# Split the text into paragraphs at blank lines, then fill each paragraph
# greedily word by word; never break inside a word.
cat > termfmt/wrap.py <<'PY'
"""Re-flowing plain text to a fixed terminal width."""

from __future__ import annotations


def _paragraphs(text: str) -> list[list[str]]:
    """Split ``text`` at blank lines into paragraphs, each a list of words."""
    paragraphs: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.strip():
            current.extend(line.split())
        elif current:
            paragraphs.append(current)
            current = []
    if current:
        paragraphs.append(current)
    return paragraphs


def _fill(words: list[str], width: int) -> list[str]:
    """Greedily pack ``words`` into lines of at most ``width`` characters."""
    lines: list[str] = []
    line = ""
    for word in words:
        if not line:
            line = word
        elif len(line) + 1 + len(word) <= width:
            line = f"{line} {word}"
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines


def wrap(text: str, width: int = 80) -> str:
    """Re-flow ``text`` so that no line is longer than ``width`` characters.

    Words (runs of non-whitespace) are kept intact and separated by single
    spaces; a word longer than ``width`` is put on a line of its own.
    Paragraphs -- separated by one or more blank lines in ``text`` -- stay
    separated by exactly one blank line.  Line breaks inside a paragraph are
    treated like spaces.  The result has no trailing newline.
    """
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    return "\n\n".join(
        "\n".join(_fill(words, width)) for words in _paragraphs(text)
    )
PY
