"""Re-flowing plain text to a fixed terminal width."""

from __future__ import annotations


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
    flat = " ".join(text.split())
    lines = []
    while len(flat) > width:
        lines.append(flat[:width].rstrip())
        flat = flat[width:].lstrip()
    if flat:
        lines.append(flat)
    return "\n".join(lines)
