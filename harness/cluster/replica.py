"""A model replica: a Ray actor that owns one on-demand server on its node.

The server is the single-machine code as it is (ManagedEndpoint over VLLMServer, ReplayEndpoint,
ExternalEndpoint): started by the first episode's ``ensure_up``, stopped by its own idle watch,
restarted by a later ``ensure_up`` after a crash or an idle stop. Its log and metrics go to a
directory on the replica's node; ``release`` hands them back to the driver, which writes them
into the run directory. With ``--concurrency auto`` the replica runs its own admission controller
on its server's scrapes: the driver tells it the episodes in flight there and routes by the limit
it answers (cluster/executor.py).
"""

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.admission.gate import ADMISSION_FILE, Admission, auto_admission, planned_start
from harness.replay.endpoint import ReplayEndpoint, is_replay_model
from harness.server.config import ServerConfig
from harness.server.endpoint import ExternalEndpoint, ManagedEndpoint, ModelEndpoint

_FILES = ("server.log", "server_metrics.jsonl", "admission.jsonl")
_MAX_FILE_BYTES = 16 * 2**20  # a log's last 16 MiB comes back; the rest stays on the node


class ReplicaSpec(BaseModel):
    """What a replica serves, as the driver decided it."""

    model_config = ConfigDict(frozen=True)

    model: str
    server: dict[str, Any] = {}  # ServerConfig fields for a managed vLLM server
    base_url: str | None = None
    api_key: str = "EMPTY"
    idle_timeout: float = 300.0
    # --concurrency auto: the replica's own controller admits its episodes (the driver asks it).
    auto: bool = False
    sandbox_cpus: float = 2.0
    sandbox_memory_gib: float = 4.0
    max_concurrency: int | None = None


class Address(BaseModel):
    """Where a replica's server answers now (the port and key change when it restarts)."""

    model_config = ConfigDict(frozen=True)

    openai_url: str
    api_key: str
    name: str


class Replica:
    """The actor's class (``ray.remote(Replica)`` at placement): calls run one at a time."""

    def __init__(self, spec: ReplicaSpec, workdir: str) -> None:
        self.spec = spec
        self.workdir = Path(workdir)
        self._endpoint: ModelEndpoint | None = None
        self._admission: Admission | None = None

    def _ep(self) -> ModelEndpoint:
        if self._endpoint is None:  # made on first use, so that a refusal reaches the caller as itself
            spec = self.spec
            if spec.base_url:
                self._endpoint = ExternalEndpoint(spec.base_url, spec.api_key, spec.model)
            elif is_replay_model(spec.model):
                self._endpoint = ReplayEndpoint(spec.model, spec.idle_timeout)
            else:
                config = ServerConfig(model=spec.model, idle_timeout=spec.idle_timeout, **spec.server)
                self._endpoint = ManagedEndpoint(config, self.workdir)
        return self._endpoint

    def ensure_up(self) -> Address:
        ep = self._ep()
        ep.ensure_up()
        return Address(openai_url=ep.openai_url, api_key=ep.api_key, name=ep.name)

    def healthy(self) -> bool:
        return self._ep().healthy()

    def admission(self, in_flight: int) -> int:
        """--concurrency auto: the episodes the driver has in flight here now, and the limit this
        replica's controller sets from its own server's scrapes (on this node's sandbox room)."""
        if self._admission is None:
            ep, spec = self._ep(), self.spec
            start = planned_start(
                ep,
                cpus=spec.sandbox_cpus,
                memory_gib=spec.sandbox_memory_gib,
                max_concurrency=spec.max_concurrency,
            )
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._admission = auto_admission(ep, start, self.workdir / ADMISSION_FILE)
        return self._admission.set_in_flight(in_flight)

    def server_pid(self) -> int | None:
        """The server's process id (None: not running, or not a vLLM server)."""
        ep = self._ep()
        server = ep.server if isinstance(ep, ManagedEndpoint) else None
        return server.pid if server is not None and server.is_running() else None

    def stop_reason(self) -> str | None:
        """Why the server last stopped (idle, crashed, ...); None while it runs or never ran."""
        ep = self._ep()
        if isinstance(ep, ManagedEndpoint):
            return None if ep.server.is_running() else ep.server.stop_reason
        return ep.stop_reason if isinstance(ep, ReplayEndpoint) else None

    def release(self) -> tuple[float, float, dict[str, bytes]]:
        """Stop the server; (up seconds, busy seconds, its files by name) for the driver."""
        ep = self._ep()
        ep.release()
        if self._admission is not None:
            self._admission.close()
        facts = ep.facts()
        up, busy = (facts.up_s, facts.busy_s) if facts is not None else (0.0, 0.0)
        if isinstance(ep, ReplayEndpoint):
            up = ep.up_seconds
        files = {}
        for name in _FILES:
            path = self.workdir / name
            if path.is_file():
                with path.open("rb") as fh:
                    fh.seek(max(0, path.stat().st_size - _MAX_FILE_BYTES))
                    files[name] = fh.read()
        return up, busy, files
