"""Progress display shared by long operations (server start, setup, preparation)."""

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

console = Console(stderr=True)


@contextmanager
def status(message: str) -> Iterator[None]:
    """A spinner with elapsed time while a long step runs; a check mark line when it ends."""
    import time

    start = time.monotonic()
    with console.status(message):
        yield
    console.print(f"[green]✓[/] {message} ({time.monotonic() - start:.0f} s)")
