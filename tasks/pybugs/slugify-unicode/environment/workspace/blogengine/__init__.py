"""A minimal static blog engine."""

from .posts import Post
from .text import excerpt, slugify, word_count

__all__ = ["Post", "excerpt", "slugify", "word_count"]
__version__ = "0.7.0"
