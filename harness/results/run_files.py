"""A run directory's files read as data that may be hostile (a copied or downloaded run): a path
a record names never leads out of the run directory, and reads are bounded (file type and size,
line length), so no planted file exhausts memory or hangs a command."""

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from harness.errors import HarnessError


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


# Far beyond what a run writes (250,000 episodes make ~0.5 GB of episodes.jsonl; a turn's line
# holds observations the scaffold already truncated), far below what exhausts a machine.
MAX_FILE_BYTES = 4 << 30
MAX_LINE_BYTES = 64 << 20


class RunFileError(HarnessError):
    """A run file that no harness command wrote: not a regular file, or too large to be one."""


def open_run_file(path: Path) -> BinaryIO:
    """``path`` opened for reading, refusing what no run holds: a device (a link to /dev/zero
    reads forever), a FIFO (it waits for a writer), a directory, a file over MAX_FILE_BYTES.
    OSError as ``open`` raises it (a missing file included)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO's open would block
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RunFileError(f"{path}: not a regular file (a device, a pipe or a directory); not read")
        if st.st_size > MAX_FILE_BYTES:
            raise RunFileError(
                f"{path}: {st.st_size / 2**30:.1f} GiB, more than a run writes "
                f"(at most {MAX_FILE_BYTES >> 30} GiB is read); not read"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=1 << 20)
    except BaseException:
        os.close(fd)
        raise


def read_run_file(path: Path) -> bytes:
    """The whole of a run file as open_run_file found it (a file still growing is cut there)."""
    with open_run_file(path) as fh:
        return fh.read(os.fstat(fh.fileno()).st_size)  # read(n) allocates n bytes up front


def run_lines(path: Path) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) of a run file, each line at most MAX_LINE_BYTES; a longer one comes as
    (number, None), read through without being kept (the caller warns and skips it)."""
    with open_run_file(path) as fh:
        number = 0
        while line := fh.readline(MAX_LINE_BYTES + 1):
            number += 1
            if len(line) > MAX_LINE_BYTES:
                while not line.endswith(b"\n") and (line := fh.readline(MAX_LINE_BYTES)):
                    pass
                yield number, None
                continue
            yield number, line
