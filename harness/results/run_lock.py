"""One eval per run directory: an flock on ``RUN/.eval.lock``, held while the eval's RunStore lives.

Two evals writing one run directory each see the other's episodes as "not done yet" and run
every episode twice, their appends interleaving in episodes.jsonl. The lock file holds the
holder's PID so that the refusal can name it. flock is released by the kernel when the holding
process dies, so a killed eval never leaves a stale lock behind.
"""

import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import IO

from harness.errors import HarnessError

LOCK_NAME = ".eval.lock"


def _not_writable(root: Path, exc: OSError) -> HarnessError:
    why = exc.strerror or type(exc).__name__
    return HarnessError(
        f"{root}: the run directory is not writable ({why}); make it writable or give another --run-dir"
    )


def _not_a_lock(root: Path, what: str) -> HarnessError:
    return HarnessError(
        f"{root / LOCK_NAME}: is {what}, not the harness's lock file; remove it (the harness never follows it)"
    )


def lock_run_dir(root: Path) -> IO[str] | None:
    """Create ``root`` and take its eval lock; the returned file holds it until closed or collected.

    Returns None when this very process already holds the lock (an eval resumed in-process, as
    tests do): the first holder keeps it. Raises HarnessError naming the PID of another holder,
    or saying that the directory cannot be written.
    """
    try:
        root.mkdir(parents=True, exist_ok=True)
        # access() also sees a read-only mount (EROFS), which root's writes would hit later
        if not os.access(root, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "read-only")
        # Never through a link: a planted `.eval.lock -> ~/.bashrc` would be truncated below and
        # given our PID. Not a regular file (a FIFO, a device): refused as well.
        fd = os.open(
            root / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _not_a_lock(root, "a symbolic link") from None
        raise _not_writable(root, exc) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _not_a_lock(root, "not a regular file")
    os.set_blocking(fd, True)
    fh = open(fd, "a+")  # noqa: SIM115 - held open for the eval's lifetime
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        fh.seek(0)
        holder = fh.read().strip()
        fh.close()
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise _not_writable(root, exc) from None
        if holder == str(os.getpid()):
            return None
        raise HarnessError(
            f"{root}: another harness eval (PID {holder or '?'}) is writing this run directory; "
            "wait for it to finish or give another --run-dir"
        ) from None
    try:
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
    except OSError as exc:
        fh.close()
        raise _not_writable(root, exc) from None
    return fh
