"""Blocking calls (a model request, a command) that give way at once to a stop or a deadline."""

import threading
import time
from collections.abc import Callable
from typing import Literal

# Often enough that a stop feels immediate; a wakeup every 50 ms costs nothing beside a model call.
_POLL_S = 0.05


class Interrupted(Exception):
    """The run stopped (``Stopped``) or the episode's wall time ran out (``TimeExceeded``)."""

    def __init__(self, why: Literal["Stopped", "TimeExceeded"]) -> None:
        super().__init__(why)
        self.why = why


def check(stop: threading.Event, deadline: float | None) -> None:
    """Raise Interrupted when the run stopped or the deadline (``time.monotonic``) passed."""
    if stop.is_set():
        raise Interrupted("Stopped")
    if deadline is not None and time.monotonic() >= deadline:
        raise Interrupted("TimeExceeded")


def wait_for[T](fn: Callable[[], T], stop: threading.Event, deadline: float | None) -> T:
    """``fn()`` in a worker thread: its result or its exception, or Interrupted the moment ``stop``
    is set or ``deadline`` passes. The worker is then left behind: the driver closes the sandbox
    (its command ends), a model request ends by its own timeout."""
    check(stop, deadline)
    done = threading.Event()
    box: dict[str, object] = {}

    def work() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="msa-call", daemon=True).start()
    while not done.wait(_POLL_S):
        check(stop, deadline)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]  # type: ignore[return-value]
