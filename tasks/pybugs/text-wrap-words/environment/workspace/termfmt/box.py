"""ASCII frames around wrapped text."""

from __future__ import annotations

from .wrap import wrap


def boxed(text: str, width: int = 40) -> str:
    """Wrap ``text`` and draw a frame around it.

    The frame is exactly ``width`` characters wide::

        +----------+
        | Hello    |
        | world    |
        +----------+
    """
    if width < 5:
        raise ValueError("a box needs to be at least 5 characters wide")
    inner = width - 4
    border = "+" + "-" * (width - 2) + "+"
    body = [f"| {line.ljust(inner)} |" for line in wrap(text, inner).split("\n")]
    return "\n".join([border, *body, border])
