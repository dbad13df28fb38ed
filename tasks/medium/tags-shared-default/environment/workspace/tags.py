"""Tag helpers for blog posts."""


def tag(name, tags=[]):
    """Add ``name`` to ``tags`` (a new list when none is given) and return the list."""
    name = name.strip().lower()
    if name not in tags:
        tags.append(name)
    return tags
