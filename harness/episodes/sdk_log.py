"""Where the OpenHands SDK's log lines go during a run: the run's log file, not the terminal.

The SDK logs through the standard ``logging`` tree under ``openhands`` and, at import, puts a rich
handler on the root logger that prints to stderr: its WARNING and ERROR lines (a stuck pattern, a
tool's traceback) broke into the progress lines between episodes. While ``sdk_log_to(path)`` is
active, the ``openhands`` logger writes to ``path`` (RUN/harness.log) and stops there; each line
names the episode whose thread logged it (``episode_label``).
"""

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LOG_FILE", "episode_label", "sdk_log_to"]

LOG_FILE = "harness.log"
_SDK_LOGGER = "openhands"
_current = threading.local()


@contextmanager
def episode_label(label: str) -> Iterator[None]:
    """Lines this thread logs meanwhile are marked with ``label`` (model/task/seedN)."""
    before = getattr(_current, "label", None)
    _current.label = label
    try:
        yield
    finally:
        _current.label = before


class _Label(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.episode = getattr(_current, "label", None) or "-"
        return True


@contextmanager
def sdk_log_to(path: Path) -> Iterator[None]:
    """The SDK's log lines (WARNING and above, as the harness sets its level) go to ``path`` only."""
    log = logging.getLogger(_SDK_LOGGER)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(episode)s] %(name)s: %(message)s"))
    handler.addFilter(_Label())
    propagate = log.propagate
    log.addHandler(handler)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.propagate = propagate
        handler.close()
