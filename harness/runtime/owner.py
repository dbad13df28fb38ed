"""Which harness process owns a container, and whether it is still alive.

Each container is labelled with the process that made it: its pid, the pid's start time (a pid
alone is reused: a dead run's pid may now be any other process's, and a live one's must never be
mistaken for a dead one's), the boot it was made in, and where that pid means something (the
machine and PID namespace: a harness in another container or on another machine, talking to the
same engine, has pids this process cannot look up). Cleanup removes only what ``owner_state``
says is ``gone``; an owner it cannot judge is left alone.
"""

import contextlib
import functools
import hashlib
import os
import socket
from typing import Literal

import psutil

LABEL_PID = "harness.pid"  # the harness process that made it
LABEL_STARTED = "harness.pid-started"  # that process's start time (``started_at``)
LABEL_BOOT = "harness.boot"  # the boot it was made in (Linux's boot_id; "" elsewhere)
LABEL_HOST = "harness.host"  # where the pid is meaningful: machine and PID namespace, hashed

OwnerState = Literal["alive", "gone", "unknown"]


def _read(path: str) -> str:
    with contextlib.suppress(OSError), open(path) as fh:
        return fh.read().strip()
    return ""


@functools.cache
def _boot() -> str:
    return _read("/proc/sys/kernel/random/boot_id")


@functools.cache
def _host() -> str:
    machine = _read("/etc/machine-id") or socket.gethostname()
    namespace = ""
    with contextlib.suppress(OSError):
        namespace = os.readlink("/proc/self/ns/pid")
    return hashlib.sha256(f"{machine}|{namespace}".encode()).hexdigest()[:12]


def started_at(pid: int) -> str | None:
    """The start time of live process ``pid`` as labelled, or None when there is none. On Linux
    the kernel's own count (clock ticks since boot, /proc/PID/stat): a wall-clock time computed
    from it moves when the clock is set, and a live owner must never look like another process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return None if fields[0] in (b"Z", b"X") else f"t{int(fields[19])}"
    except FileNotFoundError:
        return None
    except (OSError, IndexError, ValueError):  # no /proc here
        pass
    try:
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else f"{proc.create_time():.3f}"
    except psutil.Error:
        return None


def owner_labels() -> dict[str, str]:
    """This process as the owner of a container it makes."""
    return {
        LABEL_PID: str(os.getpid()),
        LABEL_STARTED: started_at(os.getpid()) or "",
        LABEL_BOOT: _boot(),
        LABEL_HOST: _host(),
    }


def owner_state(labels: dict[str, str]) -> OwnerState:
    """``alive``: the process that made the container runs (this one included); ``gone``: it has
    ended (its pid is free or another process's, or the machine rebooted since); ``unknown``: it
    ran where its pid cannot be looked up from here (another machine or PID namespace)."""
    try:
        pid = int(labels.get(LABEL_PID) or 0)
    except ValueError:
        pid = 0
    if pid <= 0:
        return "gone"  # no owner recorded: nothing can be waiting for it
    host, boot, started = labels.get(LABEL_HOST), labels.get(LABEL_BOOT), labels.get(LABEL_STARTED)
    if host is not None and host != _host():
        return "unknown"
    if boot and _boot() and boot != _boot():
        return "gone"
    now = started_at(pid)
    if now is None:
        return "gone"
    if started:
        return "alive" if started == now else "gone"  # else the pid was reused
    # A label from before start times were recorded: a live pid may be its owner, unless it is
    # this process, which labels its own containers with a start time.
    return "gone" if pid == os.getpid() else "alive"
