"""Find a Python interpreter of a given minor version without assuming pyenv or a PATH entry."""

import os
import shutil
import subprocess
from pathlib import Path


def _version_of(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.split()
        return int(out[0]), int(out[1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def find_python(major: int, minor: int) -> Path | None:
    """Return an interpreter reporting exactly ``major.minor``, or None.

    Looks at ``pythonX.Y`` on PATH, pyenv's installed versions (its shims answer only where a
    .python-version lists the version, so the binaries are used directly), then uv-managed ones.
    """
    candidates: list[str] = []
    if found := shutil.which(f"python{major}.{minor}"):
        candidates.append(found)
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted(
        (str(p) for p in pyenv_root.glob(f"versions/{major}.{minor}.*/bin/python{major}.{minor}")),
        reverse=True,
    )
    if uv := shutil.which("uv"):
        try:
            out = subprocess.run(
                [uv, "python", "find", f"{major}.{minor}"], capture_output=True, text=True, timeout=30
            )
            if out.returncode == 0 and out.stdout.strip():
                candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    for c in candidates:
        if _version_of(c) == (major, minor):
            return Path(c)
    return None
