"""`harness eval`: the phases of DESIGN.md for one or more models on a task suite.

1. preflight: tasks, scaffold, run store (resuming what is already on disk);
2. rollouts: the server up (or --base-url), episodes (task x seed x model) with bounded concurrency;
3. server down as soon as no rollout is left;
4. verification of every episode's final workspace (no GPU needed);
5. a summary per model.
Every finished episode is on disk (fsynced) before the next starts; re-running the same command
skips finished episodes and reruns an interrupted one.
"""

import hashlib
import shutil
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from harness.episodes.driver import EpisodeOutcome, run_sdk_episode
from harness.episodes.scaffold import Scaffold, load_scaffold
from harness.errors import HarnessError
from harness.monitor import ToolSchemas, validate_turn
from harness.progress import console
from harness.results.store import EpisodeError, EpisodeRecord, RunStore
from harness.server import ServerConfig, VLLMServer
from harness.tasks import Task, load_tasks, prepare_workspace, run_tests

_SERVER_ERRORS = (
    "APIConnectionError",
    "InternalServerError",
    "ServiceUnavailableError",
    "ServerCrashed",
    "Timeout",
    "APITimeoutError",
)


class EvalConfig(BaseModel):
    """Everything `harness eval` needs; CLI flags map onto these fields."""

    model_config = ConfigDict(frozen=True)

    models: tuple[str, ...] = Field(
        min_length=1, description="Checkpoints (or bundled names); with --base-url, served model names."
    )
    seeds: int = Field(1, ge=1, le=100, description="Seeds per task (1..N).")
    tasks: str = Field("smoke", description="Built-in suite name or a directory of tasks.")
    skip_unsupported: bool = Field(
        False, description="Skip Harbor tasks that need a Docker image instead of stopping."
    )
    concurrency: int = Field(1, ge=1, le=64, description="Episodes in flight at once.")
    max_iterations: int | None = Field(
        None, ge=1, description="Model turns per episode (default: task, then scaffold)."
    )
    temperature: float | None = Field(
        None, ge=0, le=2, description="Sampling temperature (default: the scaffold's)."
    )
    base_url: str | None = Field(
        None, description="Use this OpenAI-compatible server instead of starting vLLM."
    )
    api_key: str = Field("EMPTY", description="API key for --base-url.")
    run_dir: Path | None = Field(None, description="Run directory (default: results/<suite>-<time>).")
    scaffold: str = Field("openhands-codeact", description="Scaffold name or directory.")
    idle_timeout: float = Field(300.0, ge=0, description="Stop the server after this many idle seconds.")
    server: dict[str, Any] = Field(
        default_factory=dict, description="Further ServerConfig fields for the vLLM server."
    )


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


class _Endpoint:
    """Where a model's requests go: a managed vLLM server, or a given base URL."""

    def __init__(self, config: EvalConfig, model: str, run_dir: Path) -> None:
        self.model_arg = model
        self.server: VLLMServer | None = None
        self.lock = threading.Lock()
        if config.base_url:
            self.base_url, self.api_key, self.name, self.path = config.base_url, config.api_key, model, model
        else:
            server_cfg = ServerConfig(model=model, idle_timeout=config.idle_timeout, **config.server)
            self.server = VLLMServer(server_cfg, run_dir=run_dir)
            self.server.prepare()  # preflight: checkpoint and memory plan, before any GPU time
            assert self.server.checkpoint is not None
            self.name = self.server.checkpoint.request_model
            self.path = str(self.server.checkpoint.path)
            self.base_url, self.api_key = "", ""

    def ensure_up(self) -> None:
        if self.server is None:
            return
        with self.lock:
            if not self.server.is_running():
                self.server.start() if self.server.pid is None else self.server.restart()
            self.base_url = f"{self.server.base_url}/v1"
            self.api_key = self.server.api_key

    def healthy(self) -> bool:
        return self.server is None or self.server.is_running()

    def down(self) -> None:
        if self.server is not None:
            self.server.stop(reason="rollouts done")


def run_eval(config: EvalConfig) -> EvalSummary:
    tasks = load_tasks(config.tasks, skip_unsupported=config.skip_unsupported)
    scaffold = load_scaffold(config.scaffold)
    schemas = scaffold.tool_schemas()
    suite = tasks[0].suite
    run_dir = config.run_dir or Path("results") / f"{suite}-{time.strftime('%Y%m%d-%H%M%S')}"
    store = RunStore(run_dir)
    endpoints = [_Endpoint(config, m, run_dir) for m in config.models]
    store.init(
        {
            "run_id": run_dir.name,
            "tasks": sorted(t.id for t in tasks),
            "suite": suite,
            # What --tasks resolved to, so that exports can diff against the starting workspaces.
            "tasks_source": str(Path(config.tasks).resolve())
            if Path(config.tasks).exists()
            else config.tasks,
            "models": [e.name for e in endpoints],
            "seeds": list(range(1, config.seeds + 1)),
            "scaffold": scaffold.name,
            "scaffold_hash": _scaffold_hash(scaffold),
        }
    )
    _share_servers(endpoints)
    done = store.records()
    new = 0
    server_stats: dict[str, tuple[float, float]] = {}

    for group in _by_server(endpoints):
        pending = [
            (ep, t, s)
            for ep in group
            for t in tasks
            for s in range(1, config.seeds + 1)
            if (ep.name, t.id, s) not in done
        ]
        for ep in group:
            if done_for := sum(1 for k in done if k[0] == ep.name):
                console.print(f"{ep.name}: {done_for} episodes already in {run_dir}")
        if not pending:
            continue
        try:
            new += _rollouts(config, pending, store, scaffold, schemas, run_dir.name)
        finally:
            group[0].down()  # before verification: the GPU is not needed any more
        server = group[0].server
        if server is not None:
            server_stats["+".join(ep.name for ep in group)] = (server.up_seconds, server.busy_seconds)
    _append_server_stats(run_dir, server_stats)
    _verify(store, {t.id: t for t in tasks})
    summaries, headlines = _summaries(run_dir, [e.name for e in endpoints])
    return EvalSummary(run_dir=run_dir, models=summaries, new_episodes=new, headlines=headlines)


def _share_servers(endpoints: list["_Endpoint"]) -> None:
    """A LoRA adapter and its base model, both listed, share one server (it serves both names)."""
    for adapter in endpoints:
        ck = adapter.server.checkpoint if adapter.server else None
        if ck is None or ck.kind != "lora":
            continue
        for base in endpoints:
            bck = base.server.checkpoint if base.server else None
            if (
                base is not adapter
                and bck is not None
                and bck.kind == "full"
                and (bck.base_path.resolve() == ck.base_path.resolve())
            ):
                base.server, base.lock = adapter.server, adapter.lock
                base.name = ck.served_name


def _by_server(endpoints: list["_Endpoint"]) -> list[list["_Endpoint"]]:
    groups: dict[int, list[_Endpoint]] = {}
    for ep in endpoints:
        groups.setdefault(id(ep.server) if ep.server is not None else id(ep), []).append(ep)
    return list(groups.values())


def _rollouts(
    config: EvalConfig,
    pending: list[tuple["_Endpoint", Task, int]],
    store: RunStore,
    scaffold: Scaffold,
    schemas: ToolSchemas,
    run_id: str,
) -> int:
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    names = sorted({ep.name for ep, _, _ in pending})
    count = 0
    pending[0][0].ensure_up()
    with Progress(*columns, console=console) as progress, ThreadPoolExecutor(config.concurrency) as pool:
        bar = progress.add_task(f"rollouts {', '.join(names)}", total=len(pending))
        futures = [
            pool.submit(_one_episode, config, ep, task, seed, store, scaffold, schemas, run_id)
            for ep, task, seed in pending
        ]
        for fut in as_completed(futures):
            rec = fut.result()
            count += 1
            progress.advance(bar)
            loop = f" loop {rec.loop.kind.value}@{rec.loop.start_turn}" if rec.loop else ""
            who = f"{rec.model} " if len(names) > 1 else ""
            progress.console.print(
                f"  {who}{rec.task_id} seed {rec.seed}: {rec.status}{loop}, {rec.turns} turns"
                + (f" ({rec.error.type})" if rec.error else "")
            )
    return count


def _one_episode(
    config: EvalConfig,
    ep: _Endpoint,
    task: Task,
    seed: int,
    store: RunStore,
    scaffold: Scaffold,
    schemas: ToolSchemas,
    run_id: str,
) -> EpisodeRecord:
    for attempt in range(2):
        ep.ensure_up()
        edir = store.episode_dir(ep.name, task.id, seed)
        if edir.exists():
            shutil.rmtree(edir)  # an interrupted attempt: start from a fresh workspace
        workspace = prepare_workspace(task, edir / "workspace")
        outcome = run_sdk_episode(
            instruction=task.instruction_for(workspace),
            workspace=workspace,
            base_url=ep.base_url,
            model=ep.name,
            api_key=ep.api_key,
            scaffold=scaffold,
            out_dir=edir,
            seed=seed,
            max_iterations=config.max_iterations or task.limits.max_iterations,
            temperature=config.temperature,
            time_limit_s=task.limits.agent_timeout_s,
        )
        server_died = outcome.status == "error" and not ep.healthy()
        if server_died and attempt == 0:
            console.print(f"[yellow]server died during {task.id} seed {seed}: restarting it and retrying[/]")
            continue
        break
    errors, repairs, calls = _format_counts(outcome, schemas)
    traj = store.write_trajectory(store.trajectory_path(ep.name, task.id, seed), outcome.turns)
    status = {"finished": "unresolved", "stuck": "unresolved"}.get(outcome.status, outcome.status)
    rec = EpisodeRecord(
        run_id=run_id,
        model=ep.name,
        model_path=ep.path,
        task_id=task.id,
        suite=task.suite,
        seed=seed,
        status=status,  # type: ignore[arg-type]
        reward=0.0 if status == "error" else None,
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
        if status == "error"
        else None,
        trajectory=traj,
        verified=status == "error",
    )
    store.append(rec)
    return rec


def _verify(store: RunStore, tasks: dict[str, Task]) -> None:
    todo = [r for r in store.records().values() if not r.verified and r.task_id in tasks]
    if not todo:
        return
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("verification", total=len(todo))
        for rec in todo:
            task = tasks[rec.task_id]
            workspace = store.episode_dir(rec.model, rec.task_id, rec.seed) / "workspace"
            result = run_tests(task, workspace)
            status = rec.status
            if status == "unresolved" and result.resolved:
                status = "resolved"
            store.append(rec.model_copy(update={"reward": result.reward, "status": status, "verified": True}))
            progress.advance(bar)


def _append_server_stats(run_dir: Path, stats: dict[str, tuple[float, float]]) -> None:
    import json

    with (run_dir / "server_stats.jsonl").open("a") as fh:
        for model, (up, busy) in stats.items():
            fh.write(json.dumps({"model": model, "up_s": round(up, 1), "busy_s": round(busy, 1)}) + "\n")


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
