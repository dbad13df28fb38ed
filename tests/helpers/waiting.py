"""Waiting in tests: on a condition polled against a deadline, never on a sleep that hopes."""

import time
from collections.abc import Callable


def wait_for(
    condition: Callable[[], object], timeout: float = 120, what: str = "", interval: float = 0.1
) -> None:
    """Until ``condition()`` is true; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    if condition():
        return
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what or condition}")
