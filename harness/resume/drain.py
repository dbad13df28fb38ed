"""Stops that lose nothing: the first Ctrl-C or SIGTERM during the rollouts lets each running episode
finish the turn in flight, checkpoint and end, within a grace; a second signal, or the grace running
out, stops at once as before (harness/_signals.py).

A spot instance's notice gives 30-120 s: a grace of about one model turn lets every episode keep all
it has done. Outside the rollouts (server start-up, verification) there is no turn to finish, and the
first signal stops at once.
"""

import _thread
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Drain:
    """The run's graceful stop: ``event`` set means every running episode ends after its turn."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.event = threading.Event()
        self.began: float | None = None
        self.expired = False
        self._active = False
        self._timer: threading.Timer | None = None

    @contextmanager
    def during_rollouts(self) -> Iterator[None]:
        """A first signal is taken gracefully only while episodes run."""
        self._active = True
        try:
            yield
        finally:
            self._active = False
            if self._timer is not None:
                self._timer.cancel()

    @property
    def in_grace(self) -> bool:
        return self.event.is_set() and self._active

    def soft(self, signo: int) -> bool:
        """A first signal: True when it begins a graceful stop (called in the main thread by the
        signal handler); False: stop at once."""
        if not self._active or self.grace_s <= 0 or self.event.is_set():
            return False
        self.event.set()
        self.began = time.monotonic()
        self._timer = threading.Timer(self.grace_s, self._expire, args=(signo,))
        self._timer.daemon = True
        self._timer.start()
        return True

    def _expire(self, signo: int) -> None:
        """The grace ran out: the same as a second signal (the main thread stops at once)."""
        if self._active:
            self.expired = True
            _thread.interrupt_main(signal.Signals(signo))


def graceful_stop_words(drain: Drain, drained: int) -> str:
    """The start of a stopped run's last line: what the graceful stop did ("" when there was none)."""
    if not drain.event.is_set():
        return ""
    if drain.expired:
        return (
            f"the grace of {drain.grace_s:g} s ran out; {drained} episode(s) checkpointed after their turn, "
        )
    return f"{drained} running episode(s) finished their turn and checkpointed within the grace, "
