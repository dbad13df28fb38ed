"""Where an episode's model requests go: the first part of the episode seam.

One contract for every kind: ``openai_url`` always ends in ``/v1``, ``name`` is the one model
name requests carry, ``ensure_up()`` makes it answer (starting or restarting a managed server),
``healthy()`` says whether it still can, ``release()`` gives the hardware back.
"""

import contextlib
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from harness.errors import HarnessError
from harness.seam import ModelEndpoint, ServerFacts
from harness.server.base_url import openai_url
from harness.server.config import ServerConfig
from harness.server.factory import vllm_server
from harness.server.metrics_records import MetricsSample
from harness.server.process import VLLMServer

if TYPE_CHECKING:
    from harness.eval_config import EvalConfig

__all__ = ["ExternalEndpoint", "ManagedEndpoint", "ModelEndpoint", "group_by_server", "share_servers"]

# On a stop signal the server goes down at once: requests in flight are abandoned anyway.
_STOP_GRACE_S = 3.0


class ExternalEndpoint:
    """A server someone else runs (``--base-url``): nothing to start or stop."""

    def __init__(self, base_url: str, api_key: str, name: str) -> None:
        self.name = self.path = name
        self._url = openai_url(base_url)
        self._key = api_key

    @property
    def openai_url(self) -> str:
        return self._url

    @property
    def api_key(self) -> str:
        return self._key

    @property
    def server_id(self) -> str:
        return f"external:{id(self)}"

    def facts(self) -> ServerFacts | None:
        return None  # someone else's server: its time is not this run's to count

    def describe(self) -> dict[str, Any]:
        """run.json's record of it: only what was asked (its checkpoint is not the harness's to see)."""
        from harness.provenance import scrub_url

        return {
            "kind": "external",
            "path": self.path,
            "served_name": self.name,
            "base_url": scrub_url(self._url),
        }

    # How long ensure_up waits for a server someone else runs to answer again before the episode
    # goes ahead anyway (and fails as infra_error if it is still down).
    wait_s = 30.0

    def ensure_up(self) -> None:
        deadline = time.monotonic() + self.wait_s
        while not self.healthy() and time.monotonic() < deadline:
            time.sleep(1.0)

    def healthy(self) -> bool:
        """The server answers at all (``/health``; a 404 is an answer: not every server has one)
        without a 5xx."""
        root = self._url.removesuffix("/v1")
        with contextlib.suppress(httpx.HTTPError), httpx.Client(timeout=5.0, verify=_tls()) as http:
            return http.get(f"{root}/health").status_code < 500
        return False

    def release(self, *, now: bool = False) -> None:
        pass


_TLS_LOCK = threading.Lock()
_TLS: list[ssl.SSLContext] = []


def _tls() -> ssl.SSLContext:
    """One TLS context for every health check, made once: each episode's thread asks, and OpenSSL
    building contexts from the CA bundle in several threads at once failed now and then
    (``ssl.SSLError: [X509] PEM lib``; seen in CI with 4 episodes starting together)."""
    with _TLS_LOCK:
        if not _TLS:
            _TLS.append(ssl.create_default_context())
        return _TLS[0]


class ManagedEndpoint:
    """An on-demand vLLM server for one checkpoint, planned at construction (preflight), started
    by the first ``ensure_up`` and restarted by a later one after a crash."""

    def __init__(self, config: ServerConfig, run_dir: Path) -> None:
        self._server = vllm_server(config, run_dir=run_dir)
        self._server.prepare()  # checkpoint and memory plan, before any GPU time
        assert self._server.checkpoint is not None
        self.name = self._server.checkpoint.request_model
        self.path = str(self._server.checkpoint.path)
        self._lock = threading.Lock()

    @property
    def server(self) -> VLLMServer:
        return self._server

    @property
    def openai_url(self) -> str:
        return f"{self._server.base_url}/v1"

    @property
    def api_key(self) -> str:
        return self._server.api_key

    def ensure_up(self) -> None:
        """Start the server, or restart it when it is not healthy (process or engine dead, or
        ``/health`` not answering 200) or is being stopped."""
        with self._lock:
            if self._server.pid is None:
                self._server.start()
            elif not self._server.serving() or not self._server.healthy():
                # a stop under way (an idle stop) still answers /health until its process ends
                self._server.restart()

    def healthy(self) -> bool:
        return self._server.healthy()

    @property
    def server_id(self) -> str:
        return f"vllm:{id(self._server)}"

    def facts(self) -> ServerFacts:
        server = self._server
        return ServerFacts(up_s=server.up_seconds, busy_s=server.busy_seconds)

    def watch_load(self, listener: Callable[[MetricsSample], None]) -> Callable[[], None] | None:
        """``listener`` called with every scrape of this server (every start of it) until the
        returned call; None when it is not scraped (--metrics-interval 0)."""
        server = self._server
        if not server.config.metrics_interval:
            return None
        server.load_listeners.append(listener)

        def unwatch() -> None:
            with contextlib.suppress(ValueError):
                server.load_listeners.remove(listener)

        return unwatch

    def server_pids(self) -> set[int]:
        """The server's processes on this host (the API server and its engines), for the host's
        load without the server's own: empty while it is down."""
        return self._server.local_pids()

    def planned_sequences(self) -> tuple[int | None, int | None]:
        """(full-length sequences its KV cache holds, the --max-num-seqs it is launched with)."""
        plan = self._server.plan
        if plan is None:
            return None, None
        seqs = self._server.config.max_num_seqs or plan.recommended_max_num_seqs
        return plan.full_sequences, seqs

    def describe(self) -> dict[str, Any]:
        """run.json's record of it: the checkpoint's identity, template and parser in force, the vLLM
        argv (the one launched, else the one planned, port left out; never the key, which travels in
        the environment) and vLLM's and torch's versions in the server's environment."""
        from harness.provenance import scrub_argv, scrub_env
        from harness.server.launch import build_launch

        server = self._server
        assert server.checkpoint is not None and server.plan is not None
        facts = server.describe_checkpoint()
        facts["request_name"] = self.name
        try:
            python = server.environment_python()
        except HarnessError as exc:
            facts |= {"vllm_argv": None, "server_env": {"error": str(exc)}}
            return facts
        launch = server.launch or build_launch(
            python=Path(python),
            checkpoint=server.checkpoint,
            config=server.config,
            plan=server.plan,
            port=0,
            on_cpu=server.on_cpu,
        )
        argv = scrub_argv(launch.argv)
        if server.launch is None:  # planned: the port is picked at start
            argv = [a if not (i and argv[i - 1] == "--port") else "<port>" for i, a in enumerate(argv)]
        facts |= {
            "vllm_argv": argv,
            "vllm_argv_launched": server.launch is not None,
            "vllm_env": scrub_env(dict(launch.env_overrides)),
            "server_env": server.environment_versions(),
        }
        if (host := server.host_facts()) is not None:
            facts["host"] = host
        return facts

    def release(self, *, now: bool = False) -> None:
        """Down for good: an episode thread still running, or a model call through the run's
        proxy, that finds it down gets ServerClosed instead of a server nothing would stop."""
        if now:
            self._server.close(reason="run stopped", grace=_STOP_GRACE_S)
        else:
            self._server.close(reason="rollouts done")

    def share_with(self, adapter: "ManagedEndpoint") -> bool:
        """Serve this (full) model from a LoRA adapter's server when it is that adapter's base:
        one server answers both names. True when shared."""
        mine, theirs = self._server.checkpoint, adapter._server.checkpoint
        if (
            mine is None
            or theirs is None
            or theirs.kind != "lora"
            or mine.kind != "full"
            or mine.base_path.resolve() != theirs.base_path.resolve()
        ):
            return False
        self._server, self._lock = adapter._server, adapter._lock
        self.name = theirs.served_name
        return True


def share_servers(endpoints: list[ModelEndpoint]) -> None:
    """A LoRA adapter and its base model, both listed, share one server."""
    managed = [e for e in endpoints if isinstance(e, ManagedEndpoint)]
    for adapter in managed:
        for base in managed:
            if base is not adapter and base.server is not adapter.server:
                base.share_with(adapter)


def group_by_server(endpoints: list[ModelEndpoint]) -> list[list[ModelEndpoint]]:
    """Endpoints that share a server, together (the server is brought up and down once per group)."""
    groups: dict[str, list[ModelEndpoint]] = {}
    for ep in endpoints:
        groups.setdefault(ep.server_id, []).append(ep)
    return list(groups.values())


def make_managed(config: "EvalConfig", model: str, run_dir: Path) -> ManagedEndpoint:
    """The registry's factory for an on-demand vLLM server (planned here, started on demand)."""
    options = config.server.model_dump(exclude_defaults=True)
    return ManagedEndpoint(ServerConfig(model=model, idle_timeout=config.idle_timeout, **options), run_dir)


def make_external(config: "EvalConfig", model: str, run_dir: Path) -> ExternalEndpoint:
    """The registry's factory for --base-url: ``model`` is the served name."""
    assert config.base_url is not None
    return ExternalEndpoint(config.base_url, config.api_key, model)


def endpoint_kind(config: "EvalConfig", model: str) -> str:
    """Which endpoint of harness/registry.py serves ``model``: the form of the model names it."""
    from harness.replay.endpoint import is_replay_model

    return "external" if config.base_url else "replay" if is_replay_model(model) else "vllm"
