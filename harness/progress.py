"""Progress display shared by long operations (server start, setup, rollouts, verification).

In a terminal: rich's live bars and spinners. In a log (output not a terminal: `harness eval ... >
run.log 2>&1`, a batch job), a live display draws nothing until it ends, and rich wraps every line
at 80 columns. So there: no wrapping (a table takes its content's width), and a long phase prints a
plain progress line every ``HARNESS_PROGRESS_INTERVAL`` seconds (default 60) and when it ends.
"""

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["Bar", "console", "log_interval", "make_console", "progress_bar", "spinner", "status"]

# Width of a console writing to a log: wide enough that no table or line of ours is wrapped.
_LOG_WIDTH = 1000
_DEFAULT_INTERVAL_S = 60.0


def make_console(*, stderr: bool = False) -> Console:
    """A rich console; writing to a log (not a terminal), it does not wrap at 80 columns. COLUMNS,
    when set, still decides the width."""
    out = Console(stderr=stderr)
    if not out.is_terminal and not os.environ.get("COLUMNS"):
        out = Console(stderr=stderr, width=_LOG_WIDTH)
    return out


console = make_console(stderr=True)


def log_interval() -> float:
    """Seconds between progress lines in a log (HARNESS_PROGRESS_INTERVAL, default 60)."""
    try:
        value = float(os.environ.get("HARNESS_PROGRESS_INTERVAL", _DEFAULT_INTERVAL_S))
    except ValueError:
        return _DEFAULT_INTERVAL_S
    return value if value > 0 else _DEFAULT_INTERVAL_S


def _elapsed(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class _Ticker:
    """Calls ``say(elapsed_s)`` every log_interval() seconds on a daemon thread until stopped."""

    def __init__(self, say: "_Say") -> None:
        self._say = say
        self._stop = threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="progress-ticker", daemon=True)
        self._thread.start()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def _run(self) -> None:
        interval = log_interval()
        while not self._stop.wait(interval):
            self._say(self.elapsed)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class _Say(Protocol):
    def __call__(self, elapsed: float) -> None: ...


class Bar(Protocol):
    """A phase with a known number of steps: advance() after each, print() for a line above it."""

    def advance(self, steps: int = 1) -> None: ...

    def print(self, text: str) -> None: ...

    def status(self, text: str) -> None:
        """A live part after the description (episodes in flight, the KV cache); safe from any thread."""
        ...


class _RichBar:
    def __init__(self, progress: Progress, task: object, description: str) -> None:
        self._progress, self._task, self._description = progress, task, description

    def advance(self, steps: int = 1) -> None:
        self._progress.advance(self._task, steps)  # type: ignore[arg-type]

    def status(self, text: str) -> None:
        self._progress.update(self._task, description=f"{self._description} [dim]{escape(text)}[/]")  # type: ignore[arg-type]

    def print(self, text: str) -> None:
        self._progress.console.print(text, highlight=False)


class _LogBar:
    def __init__(self, description: str, total: int) -> None:
        self.description, self.total, self.done = description, total, 0
        self.live = ""
        self._lock = threading.Lock()
        self.ticker = _Ticker(self._say)

    def _say(self, elapsed: float, end: str = "") -> None:
        with self._lock:
            done, live = self.done, self.live
        live = f"; {escape(live)}" if live and not end else ""
        console.print(
            f"{self.description}: {done}/{self.total}{end} ({_elapsed(elapsed)}{live})", highlight=False
        )

    def advance(self, steps: int = 1) -> None:
        with self._lock:
            self.done += steps

    def status(self, text: str) -> None:
        with self._lock:
            self.live = text

    def print(self, text: str) -> None:
        console.print(text, highlight=False)


@contextmanager
def progress_bar(description: str, total: int) -> Iterator[Bar]:
    """A progress bar in a terminal; in a log, a line every log_interval() seconds and at the end."""
    if console.is_terminal:
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console) as progress:
            yield _RichBar(progress, progress.add_task(description, total=total), description)
        return
    bar = _LogBar(description, total)
    try:
        yield bar
    finally:
        bar.ticker.stop()
        bar._say(bar.ticker.elapsed, end=" done" if bar.done >= total else "")


class Spinner(Protocol):
    def update(self, text: str) -> None: ...


class _LogSpinner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.ticker = _Ticker(
            lambda elapsed: console.print(f"{self.text} ({_elapsed(elapsed)})", highlight=False)
        )

    def update(self, text: str) -> None:
        self.text = text


@contextmanager
def spinner(message: str, refresh_per_second: float = 4) -> Iterator[Spinner]:
    """``console.status`` in a terminal; in a log, the message now and its latest update at intervals."""
    if console.is_terminal:
        with console.status(message, refresh_per_second=refresh_per_second) as spin:
            yield spin
        return
    console.print(message, highlight=False)
    log_spin = _LogSpinner(message)
    try:
        yield log_spin
    finally:
        log_spin.ticker.stop()


@contextmanager
def status(message: str) -> Iterator[None]:
    """A spinner with elapsed time while a long step runs; a check mark line when it ends."""
    start = time.monotonic()
    with spinner(message):
        yield
    console.print(f"[green]✓[/] {message} ({time.monotonic() - start:.0f} s)")
