"""A run directory's files read as data that may be hostile (a copied or downloaded run): a path
a record names never leads out of the run directory."""

from pathlib import Path


def inside_run(root: Path, rel: str) -> Path | None:
    """``root / rel`` when it stays inside the run directory, links resolved; None when it leads
    elsewhere (an absolute path, ``..``, a link out): a record's ``trajectory`` is data, and
    following it would print whatever file it names (``show``, ``report``, ``compare --html``)."""
    path = root / rel
    try:
        if path.resolve().is_relative_to(root.resolve()):
            return path
    except (OSError, RuntimeError):  # a link loop
        pass
    return None
