"""`harness proxy`: the model-call proxy for agents the harness does not run.

An agent (any CLI or script that speaks OpenAI chat completions or Anthropic Messages) is pointed
at the proxy instead of its model server; the proxy forwards to the upstream (a URL, or an
on-demand vLLM for a checkpoint that starts on the first request and stops when idle), watches
every turn (loops, tool calls against the tools each request declares), and writes each episode
into a run directory as `harness eval` does, so `loops`, `show`, `report` and `compare` read it.

Which episode a request belongs to, first match wins:
1. its path: ``/ep/<name>/v1/...`` (the agent's base URL names the episode);
2. the ``X-Harness-Episode: <name>`` header on ``/v1/...``;
3. neither: the conversation itself. A request whose messages extend an open episode's last
   request (same messages first, by role, text and tool calls) continues that episode; any other
   starts a new one (``conversation-N``). Agents that rewrite their history (a condenser,
   a summariser) start a new episode at each rewrite: name their episodes by path or header.
   Connections are no guide: clients pool and drop them between calls as they please.

An episode ends when its agent has sent nothing for ``episode_idle`` seconds (and no request is
in flight), or when the proxy stops; it is then recorded: ``episodes.jsonl`` (task = the episode's
name, seed = its attempt under that name, suite ``proxy``, not verified: the proxy sees no tests),
its turns under ``trajectories/`` and every exchange in ``episodes/.../model_calls.jsonl``.
"""

import asyncio
import contextlib
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import HarnessError
from harness.monitor import LoopConfig, LoopFinding, detect_stall, last_error
from harness.proxy.config import ProxyConfig, StopAnswer, WatchConfig
from harness.proxy.records import Exchange
from harness.proxy.server import Proxy, _Route
from harness.proxy.turns import as_dict, as_list, text_of
from harness.proxy.watch import EpisodeWatch
from harness.results.run_lock import lock_run_dir
from harness.results.store import EpisodeRecord, RunStore
from harness.seam import ModelEndpoint

MODEL_CALLS = "model_calls.jsonl"
SUITE = "proxy"
_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_STOPPED = (
    "The harness proxy stopped this episode: the model is in a loop. This episode is closed to "
    "further requests; start a new episode (another name or conversation) to go on."
)
# 404 (the episode is gone), not 400 or 403: the openai and anthropic clients retry neither, and
# litellm maps 404 alone to an error its users (mini-swe-agent) stop on at once; 400 and 403 it
# maps to errors that mini-swe-agent retries ten times over minutes.
_STOP_STATUS = 404


class StandaloneConfig(BaseModel):
    """What `harness proxy` is told (the model server, if managed, is a ServerConfig of its own)."""

    model_config = ConfigDict(frozen=True)

    run_dir: Path = Field(description="Where the episodes are recorded (a harness run directory).")
    port: int = Field(0, ge=0, le=65535, description="Port on 127.0.0.1 (0: a free one).")
    stop_loops: bool = Field(
        False,
        description="Refuse an episode's further requests once its loop is certain (HTTP 404 with a "
        "message naming the loop); without it loops are recorded and the agent goes on.",
    )
    episode_idle: float = Field(
        300.0, gt=0, description="An episode ends after this many seconds without a request."
    )
    upstream_model: str | None = Field(
        None, description="The model name sent upstream, whatever the agent names (None: its own)."
    )
    agent: str = Field("external", description="The agent's name, recorded as the episodes' scaffold.")
    loop: LoopConfig = Field(default_factory=LoopConfig, description="The loop detector's thresholds.")
    proxy: ProxyConfig = Field(default_factory=ProxyConfig, description="Timeouts and limits.")


def episode_name(text: str) -> str:
    """A name a path, a header or the store can carry: letters, digits, ``._-``; no leading dot.
    A name that is one already is kept; any other gets a digest of itself after what is left of
    it, so two names never become one episode (``..``, ``.hidden`` and ``hidden`` stay three)."""
    kept = _NAME.sub("_", text).strip("_.")[:100]
    if kept == text and kept:
        return kept
    digest = hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest()[:10]
    return f"{kept[:80] or 'episode'}-{digest}"


def _signature(messages: list[Any]) -> list[int]:
    """One hash per message: role, text and tool calls (cache marks and other decorations that
    some clients add to earlier messages turn by turn are left out)."""
    out = []
    for m in messages:
        m = as_dict(m)
        calls = tuple(
            (str(as_dict(c.get("function")).get("name")), str(as_dict(c.get("function")).get("arguments")))
            for c in as_list(m.get("tool_calls"))
            if isinstance(c, dict)
        )
        out.append(hash((m.get("role"), text_of(m.get("content")), calls, m.get("tool_call_id"))))
    return out


class _Watch(EpisodeWatch):
    """An episode's watch that also knows when it was last used and whether a request is in flight."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last = time.monotonic()
        self.busy = 0
        self.llm_s = 0.0
        self.answered = True  # the last request got a 200

    def count(self) -> int:
        self.busy += 1
        self.last = time.monotonic()
        return super().count()

    def request(self, body: Any) -> tuple[int, StopAnswer | None]:
        self.busy += 1
        self.last = time.monotonic()
        return super().request(body)

    def record(self, exchange: Exchange) -> None:
        super().record(exchange)
        self.busy = max(0, self.busy - 1)
        self.last = time.monotonic()
        self.llm_s += exchange.upstream_s
        if exchange.path == "chat/completions":
            self.answered = exchange.status == 200


class _Episode:
    __slots__ = ("key", "model", "name", "route", "seed", "signature", "started")

    def __init__(self, key: str, name: str, model: str, seed: int, route: _Route) -> None:
        self.key, self.name, self.model, self.seed, self.route = key, name, model, seed, route
        self.signature: list[int] | None = None  # the last request's messages (unnamed episodes)
        self.started = time.time()

    @property
    def watch(self) -> _Watch:
        assert isinstance(self.route.watch, _Watch)
        return self.route.watch


class StandaloneProxy(Proxy):
    """The proxy as a service: episodes opened by their first request and recorded when they end.

    ``label``: the model name the records carry (None: what each episode's first request names).
    ``running``: whether an on-demand upstream is up (None: it always is); when it is not, the
    next request waits for ``upstream.ensure_up()``. ``on_event(text)`` hears of episodes opened,
    loops found and episodes recorded (from the proxy's thread or the reaper's: keep it short).
    """

    unnamed = True

    def __init__(
        self,
        config: StandaloneConfig,
        upstream: ModelEndpoint,
        *,
        label: str | None = None,
        running: Callable[[], bool] | None = None,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        proxy_config = config.proxy.model_copy(update={"model": config.upstream_model or config.proxy.model})
        self.settings = config
        self.store = RunStore(config.run_dir)
        self._run_lock = lock_run_dir(self.store.root)  # one writer per run directory
        super().__init__(upstream, proxy_config, port=config.port)
        self._label = label
        self._running = running
        self._on_event = on_event or (lambda _text: None)
        self._episodes: dict[str, _Episode] = {}
        self._conversations = 0
        self._seeds: dict[tuple[str, str], int] = {}
        for model, task, seed in self.store.records():
            self._seeds[(model, task)] = max(seed, self._seeds.get((model, task), 0))
        self._recorded: list[EpisodeRecord] = []
        self._loose = _Route("-", EpisodeWatch("-", WatchConfig(watch=False)), upstream)
        self._starting = threading.Lock()
        self._halt = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="harness-proxy-reaper", daemon=True)
        self._write_manifest()

    # ---- the service -------------------------------------------------------------------------
    def start(self) -> "StandaloneProxy":
        super().start()
        self._reaper.start()
        return self

    def stop(self) -> None:
        """Stop serving; every open episode is recorded."""
        self._halt.set()
        super().stop()
        if self._reaper.is_alive():
            self._reaper.join(timeout=10)
        with self._lock:
            episodes = list(self._episodes.values())
            self._episodes.clear()
        for ep in episodes:
            self._close(ep)
        if self._run_lock is not None:
            self._run_lock.close()
            self._run_lock = None

    @property
    def recorded(self) -> list[EpisodeRecord]:
        """The episodes recorded so far, in the order they ended."""
        with self._lock:
            return list(self._recorded)

    def open_episodes(self) -> list[str]:
        with self._lock:
            return [ep.key for ep in self._episodes.values()]

    # ---- attribution (on the proxy's event loop: no I/O beyond opening a record file) ----------
    def _route(self, slug: str | None, named: str | None, body: object) -> _Route | None:
        messages = as_list(body.get("messages")) if isinstance(body, dict) else None
        model = str(body.get("model") or "") if isinstance(body, dict) else ""
        with self._lock:
            if slug is not None or named is not None:
                name = episode_name(slug if slug is not None else str(named))
                ep = self._episodes.get(f"name:{name}") or self._open(f"name:{name}", name, model)
            elif messages is None:  # /v1/models without a name: nobody's turn
                return self._loose
            else:
                ep = self._continued(_signature(messages), model)
            return ep.route

    def _continued(self, signature: list[int], model: str) -> _Episode:
        """The unnamed episode a conversation continues, or a new one (lock held)."""
        best: _Episode | None = None
        for ep in self._episodes.values():
            old = ep.signature
            if old is None or len(old) > len(signature) or signature[: len(old)] != old:
                continue
            # the same messages again: a retry of a request that failed, else a new episode
            if len(old) == len(signature) and ep.watch.answered:
                continue
            if best is None or len(old) > len(best.signature or ()):
                best = ep
        if best is None:
            self._conversations += 1
            name = f"conversation-{self._conversations}"
            best = self._open(f"conv:{name}", name, model)
        best.signature = signature
        return best

    def _open(self, key: str, name: str, model: str) -> _Episode:
        label = episode_name(self._label or self.config.model or model or "upstream")
        seed = self._seeds.get((label, name), 0) + 1
        self._seeds[(label, name)] = seed
        record = self.store.episode_dir(label, name, seed) / MODEL_CALLS
        watch = WatchConfig(
            loop=self.settings.loop,
            stop_on_loop=self.settings.stop_loops,
            answer=StopAnswer(status=_STOP_STATUS, message=_STOPPED),
        )
        route = _Route(
            key,
            _Watch(
                f"{label}/{name}/seed{seed}",
                watch,
                record=record,
                on_loop=lambda finding: self._loop_found(name, seed, finding),
            ),
            self.upstream,  # type: ignore[arg-type]
        )
        ep = _Episode(key, name, label, seed, route)
        self._episodes[key] = ep
        self._on_event(f"episode {name} (seed {seed}) opened")
        return ep

    def _loop_found(self, name: str, seed: int, finding: LoopFinding) -> None:
        what = "stopped" if self.settings.stop_loops else "recorded; the agent goes on"
        self._on_event(
            f"episode {name} (seed {seed}): {finding.kind.value} loop from turn {finding.start_turn}, "
            f"certain at turn {finding.detected_at} ({what})"
        )

    async def _prepare(self, route: _Route) -> None:  # type: ignore[override]
        """An on-demand server is started (or restarted after its idle stop) before forwarding."""
        if self._running is not None and not self._running():
            await asyncio.to_thread(self._bring_up)

    def _bring_up(self) -> None:
        with self._starting:  # one start however many requests wait for it
            assert self.upstream is not None and self._running is not None
            if not self._running():
                self._on_event("starting the model server (first request, or after its idle stop)")
                self.upstream.ensure_up()
                self._on_event("model server up")

    # ---- ending episodes -------------------------------------------------------------------------
    def _reap(self) -> None:
        idle = self.settings.episode_idle
        stale = idle + self.config.read_timeout_s + 60  # a request in flight that never settled
        while not self._halt.wait(min(1.0, idle / 4)):
            now = time.monotonic()
            with self._lock:
                done = [
                    ep
                    for ep in self._episodes.values()
                    if now - ep.watch.last >= (idle if ep.watch.busy == 0 else stale)
                ]
                for ep in done:
                    del self._episodes[ep.key]
            for ep in done:
                self._close(ep)

    def _close(self, ep: _Episode) -> None:
        """The episode is over: its turns, trajectory and record written."""
        watch = ep.watch
        turns = watch.finish()
        if watch.exchanges == 0:
            return
        formats = watch.formats
        errors: dict[str, int] = {}
        for fmt in formats:
            for e in fmt.errors:
                errors[e.category.value] = errors.get(e.category.value, 0) + 1
        loop = watch.loop
        stopped = loop is not None and self.settings.stop_loops
        try:
            traj = self.store.write_trajectory(self.store.trajectory_path(ep.model, ep.name, ep.seed), turns)
            record = EpisodeRecord(
                run_id=self.store.root.name,
                model=ep.model,
                model_path=str(getattr(self.upstream, "path", "") or ""),
                scaffold=self.settings.agent,
                task_id=ep.name,
                suite=SUITE,
                seed=ep.seed,
                status="loop_stopped" if stopped else "unresolved",
                turns=len(turns),
                tool_calls=sum(len(t.tool_calls) for t in turns),
                format_errors=errors,
                loop=loop,
                stall=detect_stall(turns),
                last_error=last_error(turns),
                prompt_tokens=sum(t.prompt_tokens or 0 for t in turns),
                completion_tokens=sum(t.completion_tokens or 0 for t in turns),
                wall_s=round(time.time() - ep.started, 3),
                llm_s=round(watch.llm_s, 3),
                error=None,
                trajectory=traj,
            )
            self.store.append(record)
            with self._lock:
                self._recorded.append(record)
                self._write_manifest()
        except OSError as exc:
            self._on_event(f"episode {ep.name} (seed {ep.seed}) could not be recorded: {exc}")
            return
        found = f", {loop.kind.value} loop from turn {loop.start_turn}" if loop else ", no loop"
        self._on_event(f"episode {ep.name} (seed {ep.seed}) recorded: {len(turns)} turns{found}")

    def _write_manifest(self) -> None:
        """run.json: what the run holds so far (report, show and compare read it)."""
        records = self._recorded
        path = self.store.root / "run.json"
        old: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            old = json.loads(path.read_text())
        manifest = {
            "run_id": self.store.root.name,
            "kind": "proxy",
            "tasks": sorted(set(old.get("tasks") or ()) | {r.task_id for r in records}),
            "suite": SUITE,
            "tasks_source": "",
            "models": sorted(set(old.get("models") or ()) | {r.model for r in records}),
            "seeds": sorted(set(old.get("seeds") or ()) | {r.seed for r in records}),
            "scaffold": self.settings.agent,
            "scaffold_hash": "",
            "runtime": "none",
            "upstream": self._upstream_url(),
        }
        path.write_text(json.dumps(manifest, indent=2))

    def _upstream_url(self) -> str:
        """Where requests go, for the record (a managed server's URL is not known before it starts)."""
        if self._running is not None:
            return f"vllm:{getattr(self.upstream, 'path', '')}"
        try:
            return str(getattr(self.upstream, "openai_url", ""))
        except Exception:
            return ""


def read_key(variable: str | None) -> str:
    """The upstream's key from the environment variable the user named (never from a flag: a flag
    shows in the process list)."""
    if variable is None:
        return "EMPTY"
    value = os.environ.get(variable)
    if not value:
        raise HarnessError(f"--api-key-env {variable}: that environment variable is not set or empty")
    return value
