"""Where the harness keeps state that outlives one run (server environments, prepared models)."""

import os
from pathlib import Path


def cache_dir() -> Path:
    """Root of the harness cache: $HARNESS_CACHE, else $XDG_CACHE_HOME/harness, else ~/.cache/harness."""
    if env := os.environ.get("HARNESS_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "harness"


def repo_root() -> Path:
    """The source tree holding scaffolds/ and tasks/ (the package is installed editable)."""
    return Path(__file__).resolve().parent.parent
