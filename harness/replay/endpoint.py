"""A replay server as an on-demand model endpoint: ``--model replay:SCRIPT``.

It behaves like a managed server without a GPU: started by the first ``ensure_up``, stopped
after ``idle_timeout`` seconds without a request and by ``release``, started again by a later
``ensure_up``. Cluster tests and benchmarks run model replicas of it (a script with
``"pick": "by_turn"`` plays every conversation from its start, whatever runs beside it).
"""

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.replay.script import load_script
from harness.replay.server import ReplayServer
from harness.seam import ServerFacts

if TYPE_CHECKING:
    from harness.eval_config import EvalConfig

PREFIX = "replay:"


def is_replay_model(model: str) -> bool:
    return model.startswith(PREFIX)


class ReplayEndpoint:
    """``replay:PATH``: the script at PATH served on 127.0.0.1 while episodes need it."""

    def __init__(self, model: str, idle_timeout: float = 300.0) -> None:
        self._script = load_script(Path(model.removeprefix(PREFIX)))  # a bad script fails at preflight
        self.name = self._script.model
        self.path = model
        self.idle_timeout = idle_timeout
        self.starts = 0
        self.stop_reason: str | None = None
        self.up_seconds = 0.0
        self._server: ReplayServer | None = None
        self._started_at = 0.0
        self._served_at_check = 0
        self._last_request = 0.0
        self._lock = threading.Lock()

    @property
    def openai_url(self) -> str:
        assert self._server is not None, "replay server not started"
        return self._server.base_url

    @property
    def api_key(self) -> str:
        return "EMPTY"

    @property
    def server_id(self) -> str:
        return f"replay:{id(self)}"

    def facts(self) -> ServerFacts | None:
        return None  # a script costs no GPU: its time is left out of the server figures

    def describe(self) -> dict[str, Any]:
        """run.json's record of it: the script stands for the checkpoint (its hash, its identity)."""
        from harness.provenance import file_sha256

        digest = file_sha256(Path(self.path.removeprefix(PREFIX))) or ""
        return {
            "kind": "replay",
            "path": self.path,
            "served_name": self.name,
            "checkpoint": {"kind": "replay script", "fingerprint": digest[:16], "sha256": digest},
        }

    @property
    def running(self) -> bool:
        return self._server is not None

    def ensure_up(self) -> None:
        with self._lock:
            if self._server is None:
                self._server = ReplayServer(self._script).start()
                self._started_at = self._last_request = time.monotonic()
                self._served_at_check = 0
                self.starts += 1
                self.stop_reason = None
                if self.idle_timeout:
                    threading.Thread(target=self._watch, args=(self._server,), daemon=True).start()

    def healthy(self) -> bool:
        return self._server is not None

    def _watch(self, server: ReplayServer) -> None:
        """Idle shutdown: no request for ``idle_timeout`` seconds stops the server."""
        interval = min(2.0, max(0.1, self.idle_timeout / 4))
        while True:
            time.sleep(interval)
            with self._lock:
                if self._server is not server:
                    return  # stopped (or replaced) meanwhile
                now = time.monotonic()
                if server.served != self._served_at_check:
                    self._served_at_check, self._last_request = server.served, now
                elif now - self._last_request >= self.idle_timeout:
                    self._stop(f"idle for {self.idle_timeout:g} s")
                    return

    def _stop(self, reason: str) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
            self.up_seconds += time.monotonic() - self._started_at
            self.stop_reason = reason

    def release(self, *, now: bool = False) -> None:
        with self._lock:
            self._stop("run stopped" if now else "rollouts done")


def make_replay(config: "EvalConfig", model: str, run_dir: Path) -> ReplayEndpoint:
    """The registry's factory for ``--model replay:SCRIPT``."""
    return ReplayEndpoint(model, config.idle_timeout)
