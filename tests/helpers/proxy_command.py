"""`harness proxy` as a user runs it: a subprocess whose banner gives its URL and key, stopped by
SIGTERM (what a service manager or a shell's `kill` sends), its run directory read afterwards."""

import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import HARNESS, REPO


@dataclass
class RunningProxy:
    url: str
    key: str
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 30) -> str:
        """The first output line matching ``pattern`` (read so far or arriving within ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                if re.search(pattern, line):
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r} in:\n{self.output()}")


@contextmanager
def harness_proxy(*flags: str, env: dict[str, str] | None = None) -> Iterator[RunningProxy]:
    """``harness proxy FLAGS`` until the block ends (then SIGTERM, and its exit is waited for)."""
    proc = subprocess.Popen(
        [*HARNESS, "proxy", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "1000", **(env or {})},
    )
    lines: list[str] = []
    got: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            got.put(line)

    threading.Thread(target=pump, daemon=True).start()
    url = key = None
    deadline = time.monotonic() + 60
    try:
        while (url is None or key is None) and time.monotonic() < deadline:
            try:
                line = got.get(timeout=1)
            except queue.Empty:
                if proc.poll() is not None:
                    break
                continue
            if m := re.search(r"harness proxy\S* on (http://127\.0\.0\.1:\d+)", line):
                url = m[1]
            if m := re.search(r"API key\s*: (\S+)", line):
                key = m[1]
        assert url and key, "harness proxy did not start:\n" + "\n".join(lines)
        running = RunningProxy(url, key, proc, lines)
        yield running
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    time.sleep(0.1)  # the pump's last lines


def records(run: Path) -> list[dict[str, Any]]:
    path = run / "episodes.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
