"""Word frequencies for the search index."""

from collections import Counter


def word_counts(text):
    """How often each word occurs in ``text``."""
    return Counter(text.split())
