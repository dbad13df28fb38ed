"""Where the harness keeps state that outlives one run (server environments, prepared models)."""

import os
from pathlib import Path


def absolute(path: str | os.PathLike[str]) -> Path:
    """``path`` made absolute against the current directory, once, where it enters the harness.

    Every path handed to a shell, a subprocess or the SDK must be absolute: they start in other
    directories (an agent's shell in its workspace, a test script in the workspace, podman's
    service in its own), where a relative path names something else. ``~`` is expanded and
    ``..`` folded lexically; symbolic links are kept (a run directory reached through a link
    stays there).
    """
    return Path(os.path.abspath(Path(path).expanduser()))


def cache_dir() -> Path:
    """Root of the harness cache: $HARNESS_CACHE, else $XDG_CACHE_HOME/harness, else ~/.cache/harness
    (absolute: podman's service runs in a directory of it)."""
    if env := os.environ.get("HARNESS_CACHE"):
        return absolute(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return absolute(base) / "harness"


def repo_root() -> Path:
    """The source tree holding scaffolds/ and tasks/ (the package is installed editable)."""
    return Path(__file__).resolve().parent.parent
