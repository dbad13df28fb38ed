"""Where an agent framework's log lines go during a run: the run's log file, not the terminal.

Agent frameworks log through the standard ``logging`` tree (the OpenHands SDK under ``openhands``,
which at import also puts a rich handler on the root logger that prints to stderr): their WARNING
and ERROR lines (a stuck pattern, a tool's traceback) broke into the progress lines between
episodes. While ``agent_logs_to(path, names)`` is active, the loggers ``names`` (each runner's
``loggers``) write to ``path`` (RUN/harness.log) and stop there; each line names the episode whose
thread logged it (``episode_label``).
"""

import logging
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LOG_FILE", "agent_logs_to", "episode_label"]

LOG_FILE = "harness.log"
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
def agent_logs_to(path: Path, names: Iterable[str]) -> Iterator[None]:
    """The loggers ``names``' lines (at the levels they are set to) go to ``path`` only."""
    logs = [logging.getLogger(name) for name in sorted(set(names))]
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(episode)s] %(name)s: %(message)s"))
    handler.addFilter(_Label())
    propagate = [log.propagate for log in logs]
    for log in logs:
        log.addHandler(handler)
        log.propagate = False
    try:
        yield
    finally:
        for log, before in zip(logs, propagate, strict=True):
            log.removeHandler(handler)
            log.propagate = before
        handler.close()
