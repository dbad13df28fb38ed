"""A look at this host for ``--concurrency auto`` (host.py's HostSample): the episodes' runnable
threads (the model server's left out), memory available and the kernel's memory pressure. Linux's
/proc; where it cannot be read, None (the host's side then decides nothing)."""

import os
from collections.abc import Callable
from pathlib import Path

from harness.admission.host import HostSample
from harness.cores import usable_cpus

_PROC = Path("/proc")


def _procs_running() -> int | None:
    try:
        for line in (_PROC / "stat").read_text().splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _running_threads(pids: set[int]) -> int:
    """Threads of ``pids`` that are runnable now (state R)."""
    n = 0
    for pid in pids:
        try:
            tasks = os.listdir(_PROC / str(pid) / "task")
        except OSError:
            continue
        for tid in tasks:
            try:
                stat = (_PROC / str(pid) / "task" / tid / "stat").read_bytes()
            except OSError:
                continue
            # "pid (comm) S ...": the name may hold spaces and parentheses, the state follows the last ")"
            close = stat.rfind(b")")
            if close != -1 and stat[close + 2 : close + 3] == b"R":
                n += 1
    return n


def _memory_pressure() -> float | None:
    try:
        first = (_PROC / "pressure" / "memory").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    for part in first.split():
        if part.startswith("avg10="):
            try:
                return float(part[6:])
            except ValueError:
                return None
    return None


def read_host(t: float, server_pids: Callable[[], set[int]] | None = None) -> HostSample | None:
    """The host now (``t``: the sample's time); ``server_pids``: the model server's processes on
    this host, whose threads are not the episodes'. None where /proc says nothing."""
    import psutil

    running = _procs_running()
    if running is None:
        return None
    cores = usable_cpus()
    # this thread, reading, is one of the runnable ones
    mine = 1 + (_running_threads(server_pids()) if server_pids is not None else 0)
    memory = psutil.virtual_memory()
    return HostSample(
        t=t,
        cores=float(cores),
        runnable=float(max(0, running - mine)),
        memory_available=min(1.0, max(0.0, memory.available / memory.total)) if memory.total else 1.0,
        memory_pressure=_memory_pressure(),
    )
