"""The ``Post`` model."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from .text import excerpt, slugify, word_count


@dataclass
class Post:
    """A single blog post.

    ``slug`` is derived from the title unless given explicitly.
    """

    title: str
    body: str
    published: date | None = None
    tags: list[str] = field(default_factory=list)
    slug: str = ""

    def __post_init__(self) -> None:
        if not self.title.strip():
            raise ValueError("a post needs a title")
        if not self.slug:
            self.slug = slugify(self.title)

    @property
    def url(self) -> str:
        """The post's path on the site."""
        return f"/posts/{self.slug}/"

    @property
    def reading_minutes(self) -> int:
        """Estimated reading time at 200 words per minute (at least 1)."""
        return max(1, round(word_count(self.body) / 200))

    def excerpt(self, max_words: int = 30) -> str:
        """A short plain-text preview of the body."""
        return excerpt(self.body, max_words=max_words)
