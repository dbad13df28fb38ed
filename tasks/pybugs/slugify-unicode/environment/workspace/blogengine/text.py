"""Text helpers used when rendering posts."""

from __future__ import annotations

import re

DEFAULT_SLUG_LENGTH = 60

_WORD_RE = re.compile(r"\b\w+\b")


def slugify(title: str, max_length: int = DEFAULT_SLUG_LENGTH) -> str:
    """Turn ``title`` into a URL-safe slug.

    The slug contains only lower-case ASCII letters, digits and dashes,
    with dashes separating words, and is at most ``max_length`` characters.

    >>> slugify("Hello World")
    'hello-world'
    """
    slug = title.lower()
    slug = re.sub(r"[^a-z0-9\s-]", "", slug)
    slug = re.sub(r"\s", "-", slug)
    return slug[:max_length]


def word_count(text: str) -> int:
    """Return the number of words in ``text``."""
    return len(_WORD_RE.findall(text))


def excerpt(text: str, max_words: int = 30, ellipsis: str = "…") -> str:
    """Return the first ``max_words`` words of ``text``.

    Whitespace is collapsed; ``ellipsis`` is appended only when the text was
    actually shortened.
    """
    words = text.split()
    if len(words) <= max_words:
        return " ".join(words)
    return " ".join(words[:max_words]) + ellipsis
