"""Run a command so that everything it starts ends with it, new sessions included.

    python -I -S reaper.py COMMAND [ARG ...]

A session (procs.py) holds what a test script leaves running with ``&`` or ``nohup``, but a
process that calls ``setsid`` (a daemon, ``setsid server &``) leaves it, and once its parent has
exited it belongs to init: nothing ties it to the script any more. This process is made a *child
subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``): every orphan among the command's descendants is
re-parented to it instead of init, whatever session it is in. When the command ends (or this
process gets SIGTERM: a time limit, a stopped run), every process left below it is killed and
reaped, then it exits as the command did (its exit code, or the signal that killed it).

Standard library only and started with ``-I -S``: it runs once per test script (~25 ms of CPU
more than starting the script directly; /proc is read only when something was left). Where
``prctl`` is missing (not Linux) the command runs as it would without it.
"""

import contextlib
import ctypes
import os
import signal
import sys

_PR_SET_CHILD_SUBREAPER = 36


class _Stop(Exception):
    """SIGTERM arrived: end the command's tree now."""


def _on_term(_signo: int, _frame: object) -> None:
    raise _Stop


def _children_of() -> dict[int, list[int]]:
    """Parent -> children, for every process on the machine (one pass over /proc)."""
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, []).append(int(name))
    return tree


def _below(pid: int) -> list[int]:
    tree = _children_of()
    found, todo = [], list(tree.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo += tree.get(child, [])
    return found


def end_all() -> None:
    """Kill every process below this one and reap them, until none is left (a process that
    forks while it is being killed leaves an orphan, which comes back to us: the next round)."""
    me = os.getpid()
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return  # nothing left, the usual case: no look through /proc at all
    while True:
        for pid in _below(me):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(-1, 0)  # one ended (or none is left: done)
        except ChildProcessError:
            return
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: reaper.py COMMAND [ARG ...]", file=sys.stderr)
        return 2
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(signal.SIGTERM, _on_term)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    status: int | None = None
    try:
        while status is None:
            ended, code = os.waitpid(-1, 0)  # orphans re-parented here are reaped as they end
            if ended == pid:
                status = code
    except _Stop:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cleanup runs to its end
    end_all()
    if status is None:
        status = signal.SIGTERM  # as a wait status: killed by SIGTERM, as the command was
    if os.WIFSIGNALED(status):  # ended as the command did: by the same signal
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's disposition cannot be set
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
