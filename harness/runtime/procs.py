"""Ending everything a local shell or test script started, not just the script itself.

A test script or an agent's shell is started as the leader of a session of its own; what it
leaves running (``server &``, ``nohup``, a job-control shell's background jobs, which get process
groups of their own) stays in that session. Killing the session kills them all, so nothing an
episode started outlives it. A process that calls ``setsid`` itself leaves the session: a test
script is therefore run under reaper.py (``reaped``), which ends its whole tree, new sessions
included. (An agent's local shell is not: what it starts with ``setsid`` escapes. In a container
the container's removal ends everything.)
"""

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from harness.leader import Leader

_REAPER = Path(__file__).with_name("reaper.py")
_REAPER_GRACE_S = 5.0  # for a reaper to kill and reap its tree once asked (milliseconds, usually)


def _alive(pid: int) -> bool:
    """Not a zombie (a zombie is dead already; only its parent's wait is left)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def session_members(sids: Iterable[int]) -> list[int]:
    """PIDs of the live processes in any of the sessions ``sids`` (one pass over /proc)."""
    wanted = set(sids)
    me = os.getpid()
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        with contextlib.suppress(OSError):
            if os.getsid(int(name)) in wanted and _alive(int(name)):
                members.append(int(name))
    return members


def kill_sessions(leaders: Iterable[Leader | None]) -> int:
    """SIGKILL every process of the sessions of ``leaders`` (the leaders included); the number
    killed. Never our own session, nor one whose number another process has taken since."""
    own = os.getsid(0)
    wanted = {lead.pid for lead in leaders if lead and lead.pid != own and not lead.reused()}
    killed = 0
    for _ in range(3):  # a dying parent may fork once more; a second sweep catches that child
        pids = session_members(wanted) if wanted else []
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def kill_session(leader: Leader | None) -> int:
    """``kill_sessions`` for one session."""
    return kill_sessions([leader])


def reaped(argv: list[str]) -> list[str]:
    """``argv`` run under reaper.py: when it ends, or its reaper gets SIGTERM (``end_reaped``),
    everything it started ends too, even what left its session."""
    return [sys.executable, "-I", "-S", str(_REAPER), *argv]


def end_reaped(proc: "subprocess.Popen[bytes]") -> None:
    """A ``reaped`` command ended with its tree: its reaper asked to (SIGTERM), and waited for
    (nothing to do when it has ended already: it ended its tree then)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=_REAPER_GRACE_S)


def end_reaped_sessions(leaders: Iterable[Leader]) -> int:
    """``kill_sessions`` for sessions led by reapers: each reaper is asked to end its tree first
    (SIGKILL would leave what left the session to init); the processes killed afterwards."""
    own = os.getsid(0)
    mine = [lead for lead in leaders if lead.pid != own and not lead.reused()]
    for lead in mine:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(lead.pid, signal.SIGTERM)
    deadline = time.monotonic() + _REAPER_GRACE_S
    while any(_alive(lead.pid) for lead in mine) and time.monotonic() < deadline:
        time.sleep(0.01)
    return kill_sessions(mine)


@functools.cache
def own_pid_namespace() -> tuple[str, ...]:
    """The command prefix that runs a local agent's shell in a PID namespace of its own, or ()
    where this machine allows none (no ``unshare``, or no unprivileged user namespaces).

    In there the shell is process 1 and sees only what it started (its own /proc): a
    ``kill -9 -1`` or ``pkill python`` it runs reaches nothing else, neither this harness nor the
    user's other processes, and everything in it ends when it does. As root no user namespace is
    needed; otherwise the user is mapped to itself (same uid, files and permissions; only ``sudo``
    and other users' ids look different from inside). Probed once per process (~10 ms)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    base = ("--pid", "--fork", "--kill-child", "--mount-proc")
    tries: list[tuple[str, ...]] = [(unshare, *base)] if os.geteuid() == 0 else []
    tries.append((unshare, "--user", "--map-current-user", *base))
    for prefix in tries:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            probe = subprocess.run(
                [*prefix, "sh", "-c", 'test "$$" = 1'],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=10,
            )
            if probe.returncode == 0:
                return prefix
    return ()
