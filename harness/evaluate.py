"""`harness eval`: the phases of DESIGN.md for one or more models on a task suite.

1. preflight: tasks, scaffold, run store (resuming what is already on disk);
2. rollouts: the server up (or --base-url), episodes (task x seed x model) with bounded concurrency;
3. server down as soon as no rollout is left;
4. verification of every episode's final workspace (no GPU needed);
5. a summary per model.
Every finished episode is on disk (fsynced) before the next starts; re-running the same command
skips finished episodes and reruns an interrupted one.

Faults (README, "What the harness guarantees under faults"): an episode that failed because of the
infrastructure (faults.py) is retried after the server is healthy again, and recorded as
``infra_error`` (never scored, rerun by the next eval) when retries run out. The first Ctrl-C or
SIGTERM stops the run within seconds: nothing more starts, running episodes are stopped and not
recorded (the next eval reruns them), the server goes down, and run_eval raises RunStopped.
"""

import contextlib
import hashlib
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness._signals import stop_on_signals as _stop_on_signals
from harness._text import markup
from harness.episodes.driver import EpisodeOutcome, failed_outcome, kill_running_shells
from harness.episodes.faults import disk_full
from harness.episodes.runner import EpisodeRunner, get_runner
from harness.episodes.scaffold import Scaffold, load_scaffold
from harness.episodes.sdk_log import LOG_FILE, sdk_log_to
from harness.errors import HarnessError
from harness.executor import ThreadExecutor, get_executor
from harness.monitor import ToolSchemas, validate_turn
from harness.paths import absolute
from harness.progress import console, progress_bar
from harness.replay.endpoint import ReplayEndpoint, is_replay_model
from harness.results.seeds import seed_statement
from harness.results.store import EpisodeError, EpisodeRecord, RunManifest, RunStore
from harness.runtime.base import ContainerLimits, Runtime, Sandbox
from harness.runtime.export_caps import ExportLimit, ExportLimits
from harness.runtime.export_caps import remove_tree as _remove_tree
from harness.runtime.select import get_runtime
from harness.server.config import ServerConfig
from harness.server.endpoint import (
    ExternalEndpoint,
    ManagedEndpoint,
    ModelEndpoint,
    group_by_server,
    share_servers,
)
from harness.tasks import Task, load_suite, select_tasks
from harness.tasks.fresh import verify_mode
from harness.tasks.selection import TaskLimit, TaskPatterns, narrow
from harness.tasks.verify import kill_running_tests


class EvalConfig(BaseModel):
    """Everything `harness eval` needs: the CLI's flags and the ``[eval]`` table of harness.toml
    are generated from these fields (``server`` takes the ``[server]`` table and the vLLM flags)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: tuple[str, ...] = Field(
        min_length=1,
        description="Checkpoint, bundled name, or replay:SCRIPT (a replay script served on demand); give twice "
        "for base + fine-tuned (with --base-url: served names).",
    )
    seeds: int = Field(1, ge=1, le=100, description="Seeds per task.")
    tasks: str = Field("smoke", description="Built-in suite, a directory of tasks, or a SWE-bench .jsonl.")
    task: TaskPatterns = ()
    limit: TaskLimit = None
    skip_unsupported: bool = Field(
        False, description="Skip tasks this runtime cannot run (listing them) instead of stopping."
    )
    concurrency: int = Field(
        1, ge=1, le=64, description="Episodes in flight at once (--executor ray: per model replica)."
    )
    max_iterations: int | None = Field(
        None, ge=1, description="Model turns per episode (default: the task's, then the scaffold's)."
    )
    temperature: float | None = Field(
        None, ge=0, le=2, description="Sampling temperature (default: the scaffold's)."
    )
    base_url: str | None = Field(
        None, description="Use this OpenAI-compatible server instead of starting vLLM."
    )
    api_key: str = Field("EMPTY", description="API key for --base-url.")
    run_dir: Path | None = Field(
        None, description="Run directory; rerunning resumes it (default: results/<suite>-<time>)."
    )
    scaffold: str = Field("openhands-codeact", description="Scaffold name or directory.")
    runtime: Literal["auto", "local", "docker"] = Field(
        "auto",
        description="Where episodes run: docker (a container each), local (a directory here, unconfined), "
        "auto (docker when an engine answers, else local).",
    )
    sandbox_cpus: float = Field(2.0, gt=0, description="CPUs per episode container (docker runtime).")
    sandbox_memory_gib: float = Field(
        4.0, gt=0, description="Memory per episode container in GiB, no swap (docker runtime)."
    )
    sandbox_pids: int = Field(512, ge=16, description="Processes per episode container (docker runtime).")
    export_max_gib: float = Field(
        1.0,
        gt=0,
        description="Most GiB of an episode's final files copied out of its sandbox (each file at its "
        "full size, sparse or not); over it the episode is an error naming the cap, and nothing is copied.",
    )
    export_max_files: int = Field(
        100_000,
        ge=1,
        description="Most files (and directories) of an episode's final files copied out of its sandbox.",
    )
    image_map: tuple[str, ...] = Field(
        (),
        description="FROM=TO: use image TO wherever a task's docker_image or Dockerfile FROM names FROM "
        "(exact, or a prefix ending in / or :), e.g. for a mirror registry (docker runtime).",
    )
    executor: Literal["threads", "ray"] = Field(
        "threads",
        description="How episodes are spread: threads of this process, or ray: model replicas and "
        "episodes over a Ray cluster (pip install 'harness[ray]').",
    )
    ray_address: str | None = Field(
        None,
        description="--executor ray: the cluster to join (auto: the one started on this machine with "
        "`ray start`; HOST:PORT: its head) [default: RAY_ADDRESS, else a one-machine Ray started for the run].",
    )
    ray_replicas: int | None = Field(
        None,
        ge=1,
        description="--executor ray: model replicas at most [default: one per GPU group the plan "
        "asks for on every node; one per node on a cluster without GPUs].",
    )
    idle_timeout: float = Field(300.0, ge=0, description="Stop the server after this many idle seconds.")
    server: dict[str, Any] = Field(
        default_factory=dict, description="Further ServerConfig fields for the vLLM server."
    )

    @field_validator("run_dir")
    @classmethod
    def _run_dir_absolute(cls, value: Path | None) -> Path | None:
        """Resolved once, here: a relative --run-dir means the same directory to every shell,
        test script and tool the run starts, wherever they start."""
        return None if value is None else absolute(value)

    def export_limits(self) -> ExportLimits:
        return ExportLimits(max_bytes=int(self.export_max_gib * (1 << 30)), max_files=self.export_max_files)


# ServerConfig fields that `harness eval` sets itself (or that make no sense per run).
NOT_EVAL_SERVER_FIELDS = frozenset({"model", "served_name", "idle_timeout", "startup_timeout", "port"})


def build_eval_config(flags: dict[str, Any], server_flags: dict[str, Any]) -> EvalConfig:
    """Flags over the ``[eval]`` table over the ``[server]`` table of the config file (None: not given)."""
    from pydantic import ValidationError

    from harness.server.config import config_file_values

    server_file = config_file_values("server")
    values: dict[str, Any] = {}
    if "idle_timeout" in server_file:
        values["idle_timeout"] = server_file["idle_timeout"]
    values |= config_file_values("eval")
    values |= {k: v for k, v in flags.items() if v is not None}
    values["server"] = {
        **{k: v for k, v in server_file.items() if k not in NOT_EVAL_SERVER_FIELDS},
        **{k: v for k, v in server_flags.items() if v is not None and k not in NOT_EVAL_SERVER_FIELDS},
    }
    try:
        ServerConfig(model="x", **values["server"])  # a bad [server] key fails here, named
        config = EvalConfig(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ".".join(str(p) for p in err["loc"] if p != "server") or "config"
        flag = {"models": "model"}.get(name, name)
        raise HarnessError(f"--{flag.replace('_', '-')}: {err['msg']}") from None
    ray_only = [
        f"--{k.replace('_', '-')}" for k in ("ray_address", "ray_replicas") if getattr(config, k) is not None
    ]
    if ray_only and config.executor != "ray":  # silently running on threads would not be what was asked
        raise HarnessError(
            f"{' and '.join(ray_only)}: only with --executor ray (the executor is {config.executor})"
        )
    return config


class ModelSummary(BaseModel):
    model: str
    episodes: int = 0
    resolved: int = 0
    loops: dict[str, int] = {}
    format_errors: dict[str, int] = {}
    errors: int = 0
    turns: int = 0
    tokens: int = 0
    server_up_s: float = 0.0
    server_busy_s: float = 0.0


class EvalSummary(BaseModel):
    run_dir: Path
    models: list[ModelSummary]
    new_episodes: int
    headlines: list[str] = []


def _scaffold_hash(scaffold: Scaffold) -> str:
    return hashlib.sha256(scaffold.schema_path.read_bytes()).hexdigest()[:16]


def _format_counts(
    outcome: EpisodeOutcome, schemas: ToolSchemas
) -> tuple[dict[str, int], dict[str, int], int]:
    errors: Counter[str] = Counter()
    repairs: Counter[str] = Counter()
    calls = 0
    for turn in outcome.turns:
        calls += len(turn.tool_calls)
        result = validate_turn(turn, schemas)
        errors.update(e.category.value for e in result.errors)
        repairs.update(f"{r.original}->{r.repaired}" for r in result.repairs)
    return dict(errors), dict(repairs), calls


def _sampling(config: EvalConfig, scaffold: Scaffold) -> dict[str, Any]:
    """The sampling parameters every request sends (run.json's record of them)."""
    given = config.temperature is not None
    return {
        "temperature": config.temperature if given else scaffold.sampling.temperature,
        "top_p": scaffold.sampling.top_p,
        "max_output_tokens": scaffold.sampling.max_output_tokens,
        "seed": "the episode's seed",
        "source": "--temperature" if given else f"the {scaffold.name} scaffold's default",
    }


def _endpoint(config: EvalConfig, model: str, run_dir: Path) -> ModelEndpoint:
    if config.executor == "ray":
        from harness.cluster.executor import ClusterModel

        return ClusterModel(config, model, run_dir)
    if config.base_url:
        return ExternalEndpoint(config.base_url, config.api_key, model)
    if is_replay_model(model):
        return ReplayEndpoint(model, config.idle_timeout)
    return ManagedEndpoint(
        ServerConfig(model=model, idle_timeout=config.idle_timeout, **config.server), run_dir
    )


def episode_key(model: str, task_id: str, seed: int) -> str:
    return f"{model}/{task_id}/seed{seed}"


# Retries of an episode that failed because of the infrastructure, each after the endpoint is
# healthy again (a managed server restarted); then it is recorded as infra_error.
INFRA_RETRIES = 2
_SERVER_STOP_GRACE_S = 3.0  # on a stop signal: requests in flight are abandoned anyway
_OPENING_WAIT_S = 10.0  # a stop waits this long for sandboxes being made, to remove them too


class RunStopped(HarnessError):
    """The run was stopped (Ctrl-C, SIGTERM): the CLI prints one line and exits 130 / 143."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _disk_full_error(exc: OSError, what: str) -> HarnessError:
    return HarnessError(
        f"disk full: {what} ({exc.strerror or exc}); free space and run the same command again "
        "(finished episodes are kept, unfinished ones run again)"
    )


class _Rollout:
    """What every episode of one run shares: the driver's side of the seam."""

    def __init__(
        self,
        config: EvalConfig,
        store: RunStore,
        scaffold: Scaffold,
        runtime: Runtime,
        runner: EpisodeRunner,
    ) -> None:
        self.config, self.store, self.scaffold = config, store, scaffold
        self.schemas = scaffold.tool_schemas()
        self.runtime, self.runner = runtime, runner
        self.run_id = store.root.name
        self.stop = threading.Event()
        self._lock = threading.Condition()
        self._active: dict[str, Sandbox] = {}
        self._opening = 0
        self.started = self.stopped = 0

    @contextlib.contextmanager
    def opening(self) -> Iterator[None]:
        """Around making a sandbox: a stop waits for it (briefly) so that it is removed too."""
        with self._lock:
            self._opening += 1
        try:
            yield
        finally:
            with self._lock:
                self._opening -= 1
                self._lock.notify_all()

    def track(self, key: str, sandbox: Sandbox) -> bool:
        """Register a running episode's sandbox; False once the run is stopping (close it)."""
        with self._lock:
            if self.stop.is_set():
                return False
            self._active[key] = sandbox
            self.started += 1
            return True

    def untrack(self, key: str) -> None:
        with self._lock:
            self._active.pop(key, None)

    def halt(self) -> None:
        """Stop every running episode now: their shells killed, their sandboxes closed
        (containers removed); sandboxes still being made are waited for and removed too."""
        self.stop.set()
        kill_running_shells()
        with self._lock:
            self._lock.wait_for(lambda: self._opening == 0, timeout=_OPENING_WAIT_S)
            boxes = list(self._active.values())
            self._active.clear()
        self.stopped += len(boxes)
        for box in boxes:
            with contextlib.suppress(Exception):  # already gone is fine
                box.close()


def run_eval(config: EvalConfig) -> EvalSummary:
    """The whole eval (module docstring). Raises RunStopped on Ctrl-C / SIGTERM, HarnessError on a
    user's mistake or a full disk."""
    stop = threading.Event()
    caught: list[int] = []
    counts: dict[str, int] = {}
    with _stop_on_signals(stop, caught):
        try:
            return _run_eval(config, stop, counts)
        except KeyboardInterrupt:
            stop.set()
            name = signal.Signals(caught[0]).name if caught else "SIGINT"
            code = 128 + (caught[0] if caught else signal.SIGINT)
            running, queued = counts.get("stopped", 0), counts.get("queued", 0)
            where = f" ({counts['run_dir_hint']})" if "run_dir_hint" in counts else ""
            raise RunStopped(
                f"stopped by {name}: {running} running episode(s) stopped, {queued} not started, none of "
                f"them recorded; the server is down. Run the same command to resume{where}",
                code,
            ) from None
        except OSError as exc:
            if disk_full(exc):
                raise _disk_full_error(exc, "a write failed") from None
            raise


def _run_eval(config: EvalConfig, stop: threading.Event, counts: dict[str, Any]) -> EvalSummary:
    scaffold = load_scaffold(config.scaffold)
    runtime = get_runtime(
        config.runtime,
        ContainerLimits(
            cpus=config.sandbox_cpus, memory_gib=config.sandbox_memory_gib, pids=config.sandbox_pids
        ),
        config.image_map,
        config.export_limits(),
    )
    images = runtime.name == "docker"
    suite_tasks = narrow(
        load_suite(config.tasks, images=images), config.task, config.limit, where=config.tasks
    )
    tasks = select_tasks(suite_tasks, config.tasks, skip_unsupported=config.skip_unsupported, images=images)
    suite = tasks[0].suite
    # Absolute from here on: episodes' shells and test scripts start in workspaces, not here.
    run_dir = absolute(config.run_dir or Path("results") / f"{suite}-{time.strftime('%Y%m%d-%H%M%S')}")
    store = RunStore(run_dir)
    endpoints = [_endpoint(config, m, run_dir) for m in config.models]  # ray: each model's replicas, planned
    store.init(
        RunManifest(
            run_id=run_dir.name,
            tasks=sorted(t.id for t in tasks),
            suite=suite,
            # What --tasks resolved to, so that exports can diff against the starting workspaces.
            tasks_source=str(Path(config.tasks).resolve()) if Path(config.tasks).exists() else config.tasks,
            models=[e.name for e in endpoints],
            seeds=list(range(1, config.seeds + 1)),
            scaffold=scaffold.name,
            scaffold_hash=_scaffold_hash(scaffold),
            runtime=runtime.name,
            sampling=_sampling(config, scaffold),
        )
    )
    share_servers(endpoints)
    counts["run_dir_hint"] = str(run_dir)
    said, warning = seed_statement(_sampling(config, scaffold), config.seeds, runtime.name)
    console.print(markup(said), highlight=False)
    if warning:
        console.print(f"[yellow]warning:[/] {markup(warning)}", highlight=False)
    # An infra_error episode is not done: the infrastructure failed it, so it runs again.
    done = {k: r for k, r in store.records().items() if r.status != "infra_error"}
    waiting = frozenset(episode_key(*k) for k, r in done.items() if not r.verified)
    runtime.prepare(run_dir, tasks, keep=waiting)
    ctx = _Rollout(config, store, scaffold, runtime, get_runner("openhands-sdk"))
    ctx.stop = stop
    new = 0

    for group in group_by_server(endpoints):
        pending = [
            (ep, t, s)
            for ep in group
            for t in tasks
            for s in range(1, config.seeds + 1)
            if (ep.name, t.id, s) not in done
        ]
        for ep in group:
            if done_for := sum(1 for k in done if k[0] == ep.name):
                console.print(f"{markup(ep.name)}: {done_for} episodes already in {markup(run_dir)}")
        if not pending:
            continue
        try:
            new += _rollouts(ctx, pending, counts)
        finally:
            server = group[0].server
            if stop.is_set() and server is not None:
                server.stop(reason="run stopped", grace=_SERVER_STOP_GRACE_S)
            group[0].release()  # before verification: the GPU is not needed any more
            # Written by a stopped run too: a resumed run's seconds are the sum over every start.
            _append_server_stats(run_dir, group)
    _verify(store, {t.id: t for t in tasks}, runtime, config.concurrency, stop)
    summaries, headlines = _summaries(run_dir, [e.name for e in endpoints])
    return EvalSummary(run_dir=run_dir, models=summaries, new_episodes=new, headlines=headlines)


def _rollouts(ctx: _Rollout, pending: list[tuple[ModelEndpoint, Task, int]], counts: dict[str, Any]) -> int:
    """The pending episodes run; on this machine, the first sandboxes start while the model
    server does, and each episode's start begins the next one's (runtime/warm.py)."""
    if ctx.config.executor == "ray":  # sandboxes are made on the Ray nodes
        return _run_rollouts(ctx, pending, counts)
    ctx.runtime.warm_up([t for _, t, _ in pending], ctx.scaffold.terminal_type, ctx.config.concurrency)
    try:
        with sdk_log_to(ctx.store.root / LOG_FILE):  # the SDK's warnings: the run's log, not the terminal
            return _run_rollouts(ctx, pending, counts)
    finally:
        ctx.runtime.cool_down()


def _run_rollouts(
    ctx: _Rollout, pending: list[tuple[ModelEndpoint, Task, int]], counts: dict[str, Any]
) -> int:
    names = sorted({ep.name for ep, _, _ in pending})
    count = ctx.started = 0
    counts["queued"] = len(pending)
    pending[0][0].ensure_up()
    if ctx.config.executor == "ray":  # episodes as Ray tasks; their records are appended here all the same
        from harness.cluster.executor import cluster_rollouts

        results = cluster_rollouts(ctx, pending, _record_episode)
    else:
        executor = get_executor(ctx.config.executor)
        results = executor.run(
            lambda item: _one_episode(ctx, *item), pending, ctx.config.concurrency, ctx.stop
        )
    try:
        with progress_bar(f"rollouts {', '.join(names)}", len(pending)) as bar:
            for rec in results:
                if rec is None:  # stopped while it ran: no record
                    continue
                count += 1
                bar.advance()
                # task ids and error types are data: no markup, no escapes
                bar.print(markup(_rollout_line(rec, len(names) > 1)))
    except BaseException:  # a stop signal, or an error: nothing more starts, running episodes end now
        ctx.halt()
        raise
    finally:
        counts["stopped"] = counts.get("stopped", 0) + ctx.stopped
        counts["queued"] = max(0, len(pending) - ctx.started)
    return count


def _rollout_line(rec: EpisodeRecord, name_model: bool) -> str:
    """What is known when a rollout ends: its turns and loop; the outcome comes at verification."""
    who = f"{rec.model} " if name_model else ""
    head = f"  {who}{rec.task_id} seed {rec.seed}: "
    if rec.status in ("error", "infra_error"):  # final: nothing is verified
        return head + f"{rec.status}, {rec.turns} turns" + (f" ({rec.error.type})" if rec.error else "")
    loop = f"loop {rec.loop.kind.value}@{rec.loop.start_turn}" if rec.loop else "no loop"
    limit = ", turn limit reached" if rec.status == "max_iterations" else ""
    ended = "rollout stopped" if rec.status == "loop_stopped" else "rollout done"
    return head + f"{ended} ({rec.turns} turns, {loop}{limit}) — verifying later"


def _verified_line(rec: EpisodeRecord, name_model: bool) -> str:
    """The outcome, once the tests have run on the episode's workspace."""
    who = f"{rec.model} " if name_model else ""
    reward = "-" if rec.reward is None else f"{rec.reward:g}"
    outcome = "resolved" if rec.status == "resolved" or rec.reward == 1.0 else "unresolved"
    also = f", {rec.status}" if rec.status not in ("resolved", "unresolved") else ""
    note = f" — {rec.error.message[:200]}" if rec.error and rec.error.type == "VerifyWorkspace" else ""
    return f"  {who}{rec.task_id} seed {rec.seed}: verified {outcome} (reward {reward}{also}){note}"


def _attempt(
    ctx: _Rollout, ep: ModelEndpoint, task: Task, seed: int
) -> tuple[EpisodeOutcome, Sandbox | None]:
    """One try at an episode in a fresh sandbox; the sandbox is kept (stopped) for verification."""
    ep.ensure_up()
    started = time.monotonic()
    key = episode_key(ep.name, task.id, seed)
    edir = ctx.store.episode_dir(ep.name, task.id, seed)
    with ctx.opening():
        try:
            if edir.exists():
                _remove_tree(edir)  # an interrupted attempt: start from a fresh workspace
            sandbox = ctx.runtime.open(task, edir, key, fresh=True)
        except (
            Exception
        ) as exc:  # no sandbox (its image failed to build, the engine refused, a full disk): data
            return failed_outcome(edir, "the episode's sandbox could not be made", exc, started), None
        if not ctx.track(key, sandbox):  # the run is stopping
            sandbox.close()
            stopped = failed_outcome(edir, "the run stopped", KeyboardInterrupt(), started)
            return stopped.model_copy(update={"stopped": True}), None
    try:
        outcome = ctx.runner.run(
            sandbox=sandbox,
            endpoint=ep,
            scaffold=ctx.scaffold,
            out_dir=edir,
            seed=seed,
            max_iterations=ctx.config.max_iterations or task.limits.max_iterations,
            temperature=ctx.config.temperature,
            time_limit_s=task.limits.agent_timeout_s,
            stop=ctx.stop,
        )
    except OSError as exc:  # the conversation's own files (a full disk): the infrastructure's failure
        if not disk_full(exc):
            raise
        outcome = failed_outcome(edir, "the episode's files could not be written", exc, started)
    finally:
        ctx.untrack(key)
        too_big = _finish(sandbox)  # the final files exported, the sandbox kept for verification
    if too_big is not None:  # the agent's doing: scored, and not run again
        outcome = outcome.model_copy(
            update={"status": "error", "error_type": "ExportLimit", "error": str(too_big), "infra": False}
        )
    return outcome, sandbox


def _finish(sandbox: Sandbox) -> ExportLimit | None:
    """``sandbox.finish()``; the export cap its final files went over, if they did."""
    try:
        sandbox.finish()
    except ExportLimit as exc:
        return exc
    return None


def _one_episode(ctx: _Rollout, ep: ModelEndpoint, task: Task, seed: int) -> EpisodeRecord | None:
    """Where the seam's parts meet: endpoint, sandbox, runner; the record is appended here."""
    tried = _episode_attempts(ctx, ep, task, seed)
    return None if tried is None else _record_episode(ctx, ep, task, seed, *tried)


def _episode_attempts(
    ctx: _Rollout, ep: ModelEndpoint, task: Task, seed: int
) -> tuple[EpisodeOutcome, Sandbox | None] | None:
    """The episode run to its outcome, wherever it runs (this process, or a Ray task).

    An infrastructure failure is retried (INFRA_RETRIES) once the endpoint is healthy again; an
    episode the run's stop interrupted returns None (it is not recorded).
    """
    for attempt in range(INFRA_RETRIES + 1):
        outcome, sandbox = _attempt(ctx, ep, task, seed)
        if ctx.stop.is_set():  # set before anything was stopped: this outcome may be cut short
            if sandbox is not None:
                sandbox.close()
            return None
        if not outcome.infra or attempt == INFRA_RETRIES:
            break
        console.print(
            f"[yellow]{markup(task.id)} seed {seed}: infrastructure failure ({markup(outcome.error_type)}: "
            f"{markup((outcome.error or '')[:100])}); retry {attempt + 1} of {INFRA_RETRIES} once the server answers[/]",
            highlight=False,
        )
        if sandbox is not None:
            sandbox.close()
    return outcome, sandbox


def _record_episode(
    ctx: _Rollout, ep: ModelEndpoint, task: Task, seed: int, outcome: EpisodeOutcome, sandbox: Sandbox | None
) -> EpisodeRecord:
    """The driver's part: the trajectory and the record appended to the run (infra_error when the
    retries ran out)."""
    store = ctx.store
    # stuck: the scaffold's own loop detector stopped it (outcome.loop says what it saw)
    status = {"finished": "unresolved", "stuck": "loop_stopped"}.get(outcome.status, outcome.status)
    if outcome.infra:
        status = "infra_error"
    try:
        errors, repairs, calls = _format_counts(outcome, ctx.schemas)
        traj = store.write_trajectory(store.trajectory_path(ep.name, task.id, seed), outcome.turns)
        rec = EpisodeRecord(
            run_id=ctx.run_id,
            model=ep.name,
            model_path=ep.path,
            task_id=task.id,
            suite=task.suite,
            seed=seed,
            status=status,  # type: ignore[arg-type]
            reward=0.0 if status == "error" else None,  # infra_error: no score at all
            turns=len(outcome.turns),
            tool_calls=calls,
            format_errors=errors,
            repairs=repairs,
            loop=outcome.loop,
            prompt_tokens=outcome.prompt_tokens,
            completion_tokens=outcome.completion_tokens,
            wall_s=round(outcome.wall_s, 3),
            llm_s=round(outcome.llm_s, 3),
            error=EpisodeError(type=outcome.error_type or "Error", message=outcome.error or "")
            if status in ("error", "infra_error")
            else None,
            trajectory=traj,
            # an error is final; infra_error stays unverified (flagged, never scored) and reruns
            verified=status == "error",
        )
        store.append(rec)
    except OSError as exc:
        if sandbox is not None:
            sandbox.close()
        if disk_full(exc):
            raise _disk_full_error(
                exc, f"the record of {episode_key(ep.name, task.id, seed)} could not be written"
            ) from None
        raise
    if status in ("error", "infra_error") and sandbox is not None:
        sandbox.close()  # nothing left to verify in it
    return rec


def _verify(
    store: RunStore, tasks: dict[str, Task], runtime: Runtime, concurrency: int, stop: threading.Event
) -> None:
    todo = [
        r
        for r in store.records().values()
        if not r.verified and r.status != "infra_error" and r.task_id in tasks
    ]
    if not todo:
        return
    # As many at once as episodes ran: a container's verification is mostly waiting on the
    # engine (start, exec, copy, remove); one at a time it was a serial tail after the rollouts.
    # Threads of this process, whatever the executor: the sandboxes are this machine's.
    runtime.expect_verifications([tasks[r.task_id] for r in todo], concurrency)
    work = ThreadExecutor().run(
        lambda rec: _verified(rec, tasks[rec.task_id], store, runtime), todo, concurrency, stop
    )
    name_model = len({r.model for r in todo}) > 1
    try:
        with progress_bar("verification", len(todo)) as bar:
            for rec in work:  # records appended here alone, as each verification ends
                store.append(rec)
                bar.advance()
                bar.print(markup(_verified_line(rec, name_model)))
    except BaseException:  # a stop: the tests running in the workers end with it
        kill_running_tests()
        raise
    finally:
        runtime.cool_down()  # fresh sandboxes started ahead that no verification took


def _verified(rec: EpisodeRecord, task: Task, store: RunStore, runtime: Runtime) -> EpisodeRecord:
    """``rec`` with its reward. Whatever the agent did to its workspace, this returns: a workspace
    it wrecked is verified from the starting files plus what is left (the reason in ``error``),
    and a verification that fails outright scores 0 with the reason. The run never stops here."""
    edir = store.episode_dir(rec.model, rec.task_id, rec.seed)
    note: str | None = None
    tampering: str | None = None
    mode = verify_mode(task)
    try:
        sandbox = runtime.open(task, edir, episode_key(rec.model, rec.task_id, rec.seed), fresh=False)
        try:
            result = sandbox.verify()
        finally:
            sandbox.close()
    except Exception as exc:  # anything the workspace's state can cause
        if isinstance(exc, OSError) and disk_full(exc):
            raise
        reward, resolved, note = 0.0, False, f"verification failed: {type(exc).__name__}: {exc}"[:2000]
        output = f"[harness] {note}\n"
    else:
        reward, resolved, note, tampering = result.reward, result.resolved, result.note, result.tampering
        mode, output = result.mode, result.output
    with contextlib.suppress(OSError):  # the tests' output, for `harness show` (not worth a stop)
        store.write_verifier_log(rec.model, rec.task_id, rec.seed, output)
    status = rec.status
    if status == "unresolved" and resolved:
        status = "resolved"
    update: dict[str, Any] = {"reward": reward, "status": status, "verified": True, "verify_mode": mode}
    if tampering and rec.error is None:  # what the harness caught the tested code doing
        update["error"] = EpisodeError(type="VerifyTampering", message=tampering[:2000])
    elif note and rec.error is None:
        update["error"] = EpisodeError(type="VerifyWorkspace", message=note)
    return rec.model_copy(update=update)


def _append_server_stats(run_dir: Path, group: list[ModelEndpoint]) -> None:
    """One line for this invocation's server of ``group`` (every start of it), if it managed one.

    The report reads the timeline first (runs.py); this line counts where there is none."""
    import json

    server = group[0].server
    if server is not None:
        up, busy = server.up_seconds, server.busy_seconds
    elif (seconds := getattr(group[0], "server_seconds", None)) is not None:  # Ray replicas, summed
        up, busy = seconds
    else:
        return
    line = {"model": "+".join(ep.name for ep in group), "up_s": round(up, 1), "busy_s": round(busy, 1)}
    with contextlib.suppress(OSError), (run_dir / "server_stats.jsonl").open("a") as fh:
        fh.write(json.dumps(line) + "\n")  # a full disk here: the timeline still has the seconds


def _summaries(run_dir: Path, models: list[str]) -> tuple[list[ModelSummary], list[str]]:
    """The summary table's rows and the headline per model, both from the run as stored."""
    from harness.results.metrics import headline, model_metrics
    from harness.results.runs import load_run

    try:
        run = load_run(run_dir)
    except HarnessError as exc:
        return [ModelSummary(model=m) for m in models], [f"no headline: {exc}"]
    frame = run.episodes
    rows = []
    for m in models:
        rs = frame[frame["model"] == m]
        fmt: Counter[str] = Counter()
        for d in rs["format_errors"]:
            fmt.update(d)
        server = run.server[run.server["model"] == m]
        rows.append(
            ModelSummary(
                model=m,
                episodes=len(rs),
                resolved=int((rs["status"] == "resolved").sum()),
                loops=dict(Counter(rs["loop_kind"].dropna())),
                format_errors=dict(fmt),
                errors=int((rs["status"] == "error").sum()),
                turns=int(rs["turns"].sum()),
                tokens=int(rs["tokens"].sum()),
                server_up_s=float(server["up_s"].sum()),
                server_busy_s=float(server["busy_s"].sum()),
            )
        )
    headlines = [headline(m) for m in model_metrics(run)] + [f"partial: {w}" for w in run.warnings]
    return rows, headlines
