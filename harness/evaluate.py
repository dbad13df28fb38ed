"""`harness eval`: the phases of DESIGN.md for one or more models (and scaffolds) on a task suite.

1. preflight: tasks, scaffolds and their runners, the runtime, the run store (resuming what is
   already on disk), each model's endpoint (a vLLM server is planned here, started on demand);
2. rollouts: the server up (or --base-url), episodes (task x seed x model x scaffold) on the
   executor (threads here, or Ray), each run through rollout.run_attempts;
3. server down as soon as no rollout is left;
4. verification of every episode's final workspace (verification.py, no GPU needed);
5. a summary per model.
Every finished episode is on disk (fsynced) before the next starts; re-running the same command
skips finished episodes and reruns an interrupted one. The first Ctrl-C or SIGTERM stops the run
within seconds: nothing more starts, running episodes are stopped and not recorded (the next eval
reruns them), the server goes down, and run_eval raises RunStopped.

Every backend is picked by name (harness/registry.py): the runtime (``--runtime``), each
scaffold's runner (its scaffold.toml), the executor (``--executor``) and, through the executor,
each model's endpoint. A new one is a new module and a line there; nothing here changes.
"""

import contextlib
import hashlib
import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from harness import registry
from harness._signals import stop_on_signals
from harness._text import markup
from harness.episodes.agent_log import LOG_FILE, agent_logs_to
from harness.episodes.faults import disk_full
from harness.episodes.scaffold import Scaffold, load_scaffold
from harness.errors import HarnessError
from harness.eval_config import EvalConfig, ExecutorConfig, build_eval_config
from harness.executor import Executor
from harness.paths import absolute
from harness.progress import console, progress_bar
from harness.results.masking import mask_run
from harness.results.seeds import seed_statement
from harness.results.store import EpisodeRecord, RunStore
from harness.resume import Drain, graceful_stop_words
from harness.rollout import Arm, Pending, Rollout, arm_label, disk_full_error, episode_key, record_episode
from harness.run_manifest import build_manifest, complete_manifest
from harness.runtime.select import make_runtime
from harness.seam import ModelEndpoint
from harness.server.endpoint import group_by_server, share_servers
from harness.tasks import Task, load_suite, select_tasks
from harness.tasks.harbor_config import host_vars_allowed
from harness.tasks.loader import check_source, unnamed_host_var
from harness.tasks.selection import narrow
from harness.verification import verify_run

__all__ = ["EvalConfig", "EvalSummary", "ExecutorConfig", "RunStopped", "build_eval_config", "run_eval"]


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


class RunStopped(HarnessError):
    """The run was stopped (Ctrl-C, SIGTERM): the CLI prints one line and exits 130 / 143."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def make_arms(config: EvalConfig) -> dict[str, Arm]:
    """Each scaffold of the run with its runner (by the name its scaffold.toml gives)."""
    arms: dict[str, Arm] = {}
    for name in config.scaffolds:
        scaffold = load_scaffold(name)
        runner = registry.load("runner", scaffold.runner, flag=f"scaffold {scaffold.name}: runner")
        arms[name] = Arm(scaffold, runner(scaffold, config.loop), scaffold.tool_schemas())
    return arms


def _scaffolds_hash(arms: dict[str, Arm]) -> str:
    digest = hashlib.sha256()
    for arm in arms.values():
        digest.update(arm.scaffold.schema_path.read_bytes())
    return digest.hexdigest()[:16]


def _sampling(config: EvalConfig, scaffold: Scaffold) -> dict[str, Any]:
    """The sampling parameters every request sends (run.json's record of them)."""
    flags = (("--temperature", config.temperature), ("--max-output-tokens", config.max_output_tokens))
    given = ", ".join(flag for flag, value in flags if value is not None)
    return {
        "temperature": scaffold.sampling.temperature if config.temperature is None else config.temperature,
        "top_p": scaffold.sampling.top_p,
        "max_output_tokens": config.max_output_tokens or scaffold.sampling.max_output_tokens,
        "seed": "the episode's seed",
        "source": given or f"the {scaffold.name} scaffold's default",
    }


def run_eval(config: EvalConfig) -> EvalSummary:
    """The whole eval (module docstring). Raises RunStopped on Ctrl-C / SIGTERM, HarnessError on a
    user's mistake or a full disk."""
    stop = threading.Event()
    caught: list[int] = []
    counts: dict[str, Any] = {}
    # Ray's episodes hear of a graceful stop through the run's mailbox (cluster/mirror.py)
    drain = Drain(config.stop_grace)
    with stop_on_signals(stop, caught, drain), host_vars_allowed(config.sandbox.task_env):
        try:
            return _run_eval(config, stop, counts, drain)
        except KeyboardInterrupt:
            stop.set()
            name = signal.Signals(caught[0]).name if caught else "SIGINT"
            code = 128 + (caught[0] if caught else signal.SIGINT)
            running, queued = counts.get("stopped", 0), counts.get("queued", 0)
            where = f" ({counts['run_dir_hint']})" if "run_dir_hint" in counts else ""
            raise RunStopped(
                f"stopped by {name}: {graceful_stop_words(drain, counts.get('drained', 0))}{running} running "
                f"episode(s) stopped, {queued} not started, none of them recorded (each goes on from its last "
                f"checkpoint); the server is down. Run the same command to resume{where}",
                code,
            ) from None
        except OSError as exc:
            if disk_full(exc):
                raise disk_full_error(exc, "a write failed") from None
            raise
        finally:
            if "complete" in counts:  # run.json: when this invocation ended, the servers' argv
                with contextlib.suppress(Exception):
                    counts["complete"]()


def _tasks(config: EvalConfig, images: bool) -> list[Task]:
    suite = load_suite(config.tasks, images=images, swebench_images=config.sandbox.swebench_images)
    suite = narrow(suite, config.task, config.limit, where=config.tasks)
    tasks = select_tasks(suite, config.tasks, skip_unsupported=config.skip_unsupported, images=images)
    if (refused := unnamed_host_var(tasks, config.sandbox.task_env)) is not None:
        raise HarnessError(refused)
    return tasks


def _run_eval(config: EvalConfig, stop: threading.Event, counts: dict[str, Any], drain: Drain) -> EvalSummary:
    arms = make_arms(config)
    check_source(config.tasks)  # a mistyped --tasks before any engine starts for it
    runtime = make_runtime(config.runtime, config.sandbox)
    tasks = _tasks(config, images=runtime.images)
    suite = tasks[0].suite
    # Absolute from here on: episodes' shells and test scripts start in workspaces, not here.
    run_dir = absolute(config.run_dir or Path("results") / f"{suite}-{time.strftime('%Y%m%d-%H%M%S')}")
    store = RunStore(run_dir)
    executor: Executor = registry.load("executor", config.executor.name, flag="--executor")(config)
    endpoints = [executor.endpoint(config, m, run_dir) for m in config.models]  # planned here
    first = next(iter(arms.values())).scaffold
    sampling = _sampling(config, first)
    manifest = build_manifest(
        config,
        run_dir=run_dir,
        tasks=tasks,
        endpoints=endpoints,
        arms=arms,
        runtime=runtime.name,
        sampling=sampling,
        scaffold_hash=_scaffolds_hash(arms),
    )
    if forced := store.init(manifest, force=config.force_resume):
        console.print(f"[yellow]warning:[/] --force-resume: {markup('; '.join(forced))}", highlight=False)
    counts["complete"] = lambda: complete_manifest(store, endpoints, config.models)
    share_servers(endpoints)
    counts["run_dir_hint"] = str(run_dir)
    said, warning = seed_statement(sampling, config.seeds, runtime.name)
    console.print(markup(said), highlight=False)
    if warning:
        console.print(f"[yellow]warning:[/] {markup(warning)}", highlight=False)
    # An infra_error episode is not done: the infrastructure failed it, so it runs again.
    done = {k: r for k, r in store.records().items() if r.status != "infra_error"}
    waiting = frozenset(episode_key(*k) for k, r in done.items() if not r.verified)
    runtime.prepare(run_dir, tasks, keep=waiting)
    ctx = Rollout(config, store, arms, runtime)
    ctx.stop, ctx.drain = stop, drain
    new = 0
    for group in group_by_server(endpoints):
        pending = [
            Pending(ep, name, t, s, arm_label(ep.name, name, config.scaffolds))
            for ep in group
            for name in config.scaffolds
            for t in tasks
            for s in range(1, config.seeds + 1)
            if (arm_label(ep.name, name, config.scaffolds), t.id, s) not in done
        ]
        for label in sorted(
            {arm_label(ep.name, n, config.scaffolds) for ep in group for n in config.scaffolds}
        ):
            if done_for := sum(1 for k in done if k[0] == label):
                console.print(f"{markup(label)}: {done_for} episodes already in {markup(run_dir)}")
        if not pending:
            continue
        try:
            new += _rollouts(ctx, executor, pending, counts)
        finally:
            group[0].release(now=stop.is_set())  # before verification: the GPU is not needed any more
            # Written by a stopped run too: a resumed run's seconds are the sum over every start.
            _append_server_stats(run_dir, group)
    verify_run(store, {t.id: t for t in tasks}, runtime, config.fixed_concurrency(), stop)
    mask_run(run_dir)  # the --task-env values in the files the SDK and the tests wrote
    arm_models = {arm_label(e.name, n, config.scaffolds): e.name for e in endpoints for n in config.scaffolds}
    summaries, headlines = _summaries(run_dir, arm_models)
    return EvalSummary(run_dir=run_dir, models=summaries, new_episodes=new, headlines=headlines)


def _rollouts(ctx: Rollout, executor: Executor, pending: Sequence[Pending], counts: dict[str, Any]) -> int:
    """The pending episodes run on the executor; each record appended here, as it comes back."""
    names = sorted({p.label for p in pending})
    count = ctx.started = 0
    counts["queued"] = len(pending)
    pending[0].endpoint.ensure_up()
    results = executor.rollouts(ctx, pending)
    try:
        with (
            # the agents' own warnings: the run's log, not the terminal
            agent_logs_to(
                ctx.store.root / LOG_FILE,
                # and a checkpoint save that failed (the episode goes on: said, not shouted)
                ("harness.resume", *(n for a in ctx.arms.values() for n in a.runner.loggers)),
            ),
            progress_bar(f"rollouts {', '.join(names)}", len(pending)) as bar,
            ctx.drain.during_rollouts(),
        ):
            ctx.status = bar.status  # episodes in flight and the KV cache, live
            for finished in results:
                if finished is None:  # stopped while it ran: no record
                    continue
                rec = record_episode(ctx, finished)
                count += 1
                bar.advance()
                # task ids and error types are data: no markup, no escapes
                bar.print(markup(_rollout_line(rec, len(names) > 1)))
        if ctx.drain.event.is_set():  # every running episode ended after its turn, checkpointed
            ctx.stop.set()
            raise KeyboardInterrupt
    except BaseException:  # a stop signal, or an error: nothing more starts, running episodes end now
        ctx.halt()
        raise
    finally:
        with contextlib.suppress(Exception):
            results.close()  # type: ignore[attr-defined]  # a generator: its cleanup runs now
        counts["stopped"] = counts.get("stopped", 0) + ctx.stopped
        counts["drained"] = counts.get("drained", 0) + ctx.drained
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


def _append_server_stats(run_dir: Path, group: list[ModelEndpoint]) -> None:
    """One line for this invocation's server of ``group`` (every start of it), if it runs one.

    The report reads the timeline first (runs.py); this line counts where there is none."""
    facts = group[0].facts()
    if facts is None:
        return
    line = {
        "model": "+".join(ep.name for ep in group),
        "up_s": round(facts.up_s, 1),
        "busy_s": round(facts.busy_s, 1),
    }
    with contextlib.suppress(OSError), (run_dir / "server_stats.jsonl").open("a") as fh:
        fh.write(json.dumps(line) + "\n")  # a full disk here: the timeline still has the seconds


def _summaries(run_dir: Path, arm_models: dict[str, str]) -> tuple[list[ModelSummary], list[str]]:
    """The summary table's rows (one per model, or per MODEL@SCAFFOLD) and the headline per row,
    both from the run as stored; server seconds are each model's server's."""
    from harness.results.metrics import headline, model_metrics
    from harness.results.runs import load_run

    try:
        run = load_run(run_dir)
    except HarnessError as exc:
        return [ModelSummary(model=m) for m in arm_models], [f"no headline: {exc}"]
    frame = run.episodes
    rows = []
    for label, model in arm_models.items():
        rs = frame[frame["model"] == label]
        fmt: Counter[str] = Counter()
        for d in rs["format_errors"]:
            fmt.update(d)
        server = run.server[run.server["model"] == model]
        rows.append(
            ModelSummary(
                model=label,
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
