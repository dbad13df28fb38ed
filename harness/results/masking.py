"""The values of the host variables a run hands its tasks (``--task-env VAR``) masked in the files
it writes: a task that may read a key could have its agent print it, and then it would sit in the
trajectory, the records, the model calls and the logs.

Records, trajectories and the proxy's model calls are masked as they are written; at the end of a
run (mask_run) every other file the run wrote (the SDK's conversation, the verifier's log, the
harness log) is masked in place. The agent's own final files (``workspace/``) are left as the
agent left them: they are its output, which verification and ``export-preds`` read.
"""

import os
from pathlib import Path

from harness.tasks.harbor_config import allowed_host_vars

HIDDEN = "***"
_MIN_CHARS = 4  # shorter values (a "1", a "yes") would mask half of every file
_FILE_CAP = 256 << 20  # files past this are not rewritten (none of the run's own is near it)


def secret_values() -> list[str]:
    """The values to mask now: of the allowed variables, those set and long enough, longest first."""
    values = {os.environ.get(name, "") for name in allowed_host_vars()}
    return sorted((v for v in values if len(v) >= _MIN_CHARS), key=len, reverse=True)


def mask_text(text: str, values: list[str] | None = None) -> str:
    for value in secret_values() if values is None else values:
        text = text.replace(value, HIDDEN)
    return text


def mask_bytes(data: bytes, values: list[str] | None = None) -> bytes:
    for value in secret_values() if values is None else values:
        data = data.replace(value.encode(), HIDDEN.encode())
    return data


def mask_run(run_dir: Path) -> int:
    """Every file of the run (links not followed, ``workspace/`` trees left alone) masked in place;
    how many were changed."""
    values = secret_values()
    if not values:
        return 0
    changed = 0
    for parent, dirs, files in os.walk(run_dir):
        dirs[:] = [d for d in dirs if d != "workspace" and not os.path.islink(os.path.join(parent, d))]
        for name in files:
            path = Path(parent) / name
            try:
                if path.is_symlink() or not path.is_file() or path.stat().st_size > _FILE_CAP:
                    continue
                data = path.read_bytes()
                masked = mask_bytes(data, values)
                if masked != data:
                    tmp = path.with_name(f".{name}.masking")
                    tmp.write_bytes(masked)
                    os.replace(tmp, path)
                    changed += 1
            except OSError:
                continue
    return changed
