"""The first Ctrl-C or SIGTERM stops a long command within seconds; the command's own cleanup
(sandboxes removed, servers down) runs to its end whatever signal comes next."""

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any, Protocol

from harness.errors import HarnessError


class Stopped(HarnessError):
    """A command stopped by a signal: the CLI prints one line and exits 128 + the signal's number."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class GracefulStop(Protocol):
    """What may take a first signal gracefully (harness/resume/drain.py)."""

    def soft(self, signo: int) -> bool:
        """True: the first signal begins a graceful stop; False: stop at once."""
        ...

    @property
    def in_grace(self) -> bool:
        """A graceful stop is under way: the next signal stops at once."""
        ...


@contextlib.contextmanager
def stop_on_signals(
    stop: threading.Event, caught: list[int], graceful: GracefulStop | None = None
) -> Iterator[None]:
    """The first SIGINT or SIGTERM sets ``stop`` and unwinds the main thread (KeyboardInterrupt);
    later ones are ignored, so the cleanup that the first one started (seconds) runs to its end.

    ``graceful`` may take the first signal softly instead (running episodes finish their turn);
    while its grace lasts, the next signal (or the grace running out) stops at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signo: int, _frame: Any) -> None:
        if caught:
            if graceful is not None and graceful.in_grace and not stop.is_set():
                stop.set()  # the second: at once, as a first would have without a grace
                raise KeyboardInterrupt
            return
        caught.append(signo)
        if graceful is not None and graceful.soft(signo):
            return
        stop.set()
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_message(caught: list[int]) -> tuple[str, int]:
    """The signal's name and the exit code a shell reports for it (SIGINT when none was caught)."""
    signo = caught[0] if caught else signal.SIGINT
    return signal.Signals(signo).name, 128 + signo
