"""A session or process-group leader known by its pid *and* its start time.

A pid is reused once its process is reaped and nothing holds the number (no member left in its
session or group), and the numbers wrap quickly: pid_max is 32,768 on many machines, and the test
suite goes round in minutes. A kill by number after the leader was reaped (``killpg``, a sweep of
a session's members) could then end a new session or group that took the number: a container
runtime's, a build step's, a stranger's shell. So the harness keeps a leader's start time with its
pid and kills by the number only while no newer process holds it.
"""

from dataclasses import dataclass


def started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc's starttime), or None: gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Leader:
    """A process as it was seen: its pid (which names its session or group) and its start time."""

    pid: int
    started: int | None

    @classmethod
    def of(cls, pid: int | None) -> "Leader | None":
        """``pid`` as it is now. Call it while the number is known to be this process's: alive, or
        a child not yet reaped (``Popen.returncode`` still None), whose zombie holds the number."""
        return None if not pid else cls(pid, started(pid))

    def reused(self) -> bool:
        """Whether another process holds the number now (one that started at another time). A
        number nobody holds is not reused: what is left of the leader's session or group (its
        members hold the number) may still be killed by it."""
        now = started(self.pid)
        return now is not None and now != self.started
