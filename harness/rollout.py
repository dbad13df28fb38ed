"""One episode from the driver's side of the seam: sandbox, runner, retries, record.

Every executor (threads here, Ray tasks on other nodes: harness/cluster) runs an episode through
``run_attempts``; the driver alone turns the outcome into a record (``record_episode``). Faults
(README, "What the harness guarantees under faults"): an episode the infrastructure failed is
retried once its endpoint is healthy again, and recorded ``infra_error`` when the retries run out;
an episode the run's stop interrupted is not recorded at all. A Harbor multi-step task runs the
scaffold once per step in its one sandbox, each step verified there before the next
(harness/tasks/steps.py); its record carries the steps' results, from which the verify phase
takes its reward.
"""

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from harness._text import markup
from harness.episodes.faults import disk_full, failed_outcome
from harness.episodes.scaffold import Scaffold
from harness.errors import HarnessError
from harness.monitor import ToolSchemas, Turn, detect_stall, last_error, tamper_findings, validate_turn
from harness.progress import console
from harness.proxy import Proxy, WatchConfig
from harness.results.failures import failure_of
from harness.results.store import EpisodeError, EpisodeRecord, RunStore
from harness.resume import (
    CheckpointUnusable,
    Drain,
    EpisodeCheckpoint,
    open_checkpoint,
    set_aside,
    with_checkpoint,
)
from harness.runtime.base import EpisodeSandbox, Runtime
from harness.runtime.export_caps import ExportLimit
from harness.seam import EpisodeOutcome, EpisodeRunner, EpisodeSpec, ModelEndpoint
from harness.tasks import Task
from harness.tasks.harbor_config import StepSpec
from harness.tasks.steps import STEPS_DIR, StepResult, run_steps, step_task

if TYPE_CHECKING:
    from harness.eval_config import EvalConfig
    from harness.proxy import EpisodeWatch

# Retries of an episode that failed because of the infrastructure, each after the endpoint is
# healthy again (a managed server restarted); then it is recorded as infra_error.
INFRA_RETRIES = 2
MODEL_CALLS = "model_calls.jsonl"  # each episode's requests and responses, as the proxy saw them
_OPENING_WAIT_S = 10.0  # a stop waits this long for sandboxes being made, to remove them too


def episode_key(model: str, task_id: str, seed: int) -> str:
    return f"{model}/{task_id}/seed{seed}"


def arm_label(model: str, scaffold: str, scaffolds: tuple[str, ...]) -> str:
    """What the records call a model under a scaffold: the model itself in a one-scaffold run,
    ``MODEL@SCAFFOLD`` when the run has several (each pair is then compared like a model)."""
    return model if len(scaffolds) <= 1 else f"{model}@{scaffold}"


@runtime_checkable
class Halting(Protocol):
    """A runner with episodes to end from the main thread when the run stops (OpenHands: the
    conversations' local shells, which its episodes' own stop watches end too late for an exit)."""

    def halt(self) -> None: ...


@dataclass(frozen=True)
class Arm:
    """One scaffold of the run: its definition, runner and the tool schemas its calls are checked
    against."""

    scaffold: Scaffold
    runner: EpisodeRunner
    schemas: ToolSchemas


@dataclass(frozen=True)
class Pending:
    """An episode to run: a model's endpoint under a scaffold, on a task, with a seed."""

    endpoint: ModelEndpoint
    scaffold: str
    task: Task
    seed: int
    label: str  # arm_label: the records' model

    @property
    def key(self) -> str:
        return episode_key(self.label, self.task.id, self.seed)


@dataclass(frozen=True)
class Finished:
    """An episode's outcome, and its sandbox kept for verification (None: nothing to verify in it,
    or it ran elsewhere and its files came back)."""

    item: Pending
    outcome: EpisodeOutcome
    sandbox: EpisodeSandbox | None
    steps: "list[StepResult] | None" = None  # a multi-step task's, verified during the rollout
    retried: tuple[EpisodeError, ...] = ()  # why each earlier attempt was retried


class Rollout:
    """What every episode of one run shares, and the run's stop."""

    def __init__(
        self,
        config: "EvalConfig",
        store: RunStore,
        arms: dict[str, Arm],
        runtime: Runtime,
    ) -> None:
        self.config, self.store, self.arms, self.runtime = config, store, arms, runtime
        # Handed each attempt's checkpoints once they are open (a Ray episode's scratch directory
        # goes with its attempt: it ships them to the driver from there, cluster/mirror.py).
        self.on_checkpoint: Callable[[EpisodeCheckpoint], None] | None = None
        self.run_id = store.root.name
        self.stop = threading.Event()
        self._lock = threading.Condition()
        self._active: dict[str, EpisodeSandbox] = {}
        self._opening = 0
        self.started = self.stopped = 0
        self._proxy: Proxy | None = None
        # The progress line's live part (episodes in flight, KV cache): the driver's bar sets it.
        self.status: Callable[[str], None] = lambda _: None
        self.drain = Drain(0.0)  # the graceful stop (evaluate.py sets the run's)
        self.drained = 0  # episodes that ended after their turn for it, checkpointed
        self.resume_notes: dict[str, str] = {}  # why an episode's checkpoint was not used

    def proxy(self) -> "Proxy":
        """The run's model-call proxy (started on first use): every episode's requests go through
        it, each under its own prefix (harness/proxy)."""
        with self._lock:
            if self._proxy is None:
                self._proxy = Proxy().start()
            return self._proxy

    def close(self) -> None:
        """The proxy stopped (no thread or socket left)."""
        with self._lock:
            proxy, self._proxy = self._proxy, None
        if proxy is not None:
            proxy.stop()

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

    def track(self, key: str, sandbox: EpisodeSandbox) -> bool:
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
        """Stop every running episode now: the runners' own halts, their sandboxes closed
        (containers removed); sandboxes still being made are waited for and removed too."""
        self.stop.set()
        for arm in self.arms.values():
            if isinstance(arm.runner, Halting):
                arm.runner.halt()
        with self._lock:
            self._lock.wait_for(lambda: self._opening == 0, timeout=_OPENING_WAIT_S)
            boxes = list(self._active.values())
            self._active.clear()
        self.stopped += len(boxes)
        for box in boxes:
            with contextlib.suppress(Exception):  # already gone is fine
                box.close()


def _attempt(
    ctx: Rollout, item: Pending
) -> tuple[EpisodeOutcome, EpisodeSandbox | None, list[StepResult] | None]:
    """One try at an episode in a fresh sandbox; the sandbox is kept (stopped) for verification
    (a multi-step task's: closed, its steps verified already, their results third)."""
    item.endpoint.ensure_up()
    started = time.monotonic()
    task = item.task
    edir = ctx.store.episode_dir(item.label, task.id, item.seed)
    with ctx.opening():
        try:
            arm = ctx.arms[item.scaffold]

            def fresh() -> EpisodeSandbox:
                return ctx.runtime.open(task, edir, item.key, prep=getattr(arm.runner, "prep", None))

            # an interrupted attempt goes on from its checkpoint, else from a fresh workspace
            sandbox, checkpoint, note = open_checkpoint(
                edir, item.scaffold, fresh, every=ctx.config.checkpoint_every, drain=ctx.drain.event
            )
            if ctx.on_checkpoint is not None:
                ctx.on_checkpoint(checkpoint)
        except Exception as exc:  # no sandbox (its image failed, the engine refused, a full disk): data
            return failed_outcome("the episode's sandbox could not be made", exc, started), None, None
        if note:
            ctx.resume_notes[item.key] = note
        if not ctx.track(item.key, sandbox):  # the run is stopping
            sandbox.close()
            stopped = failed_outcome("the run stopped", KeyboardInterrupt(), started)
            return stopped.model_copy(update={"stopped": True}), None, None
    spec = EpisodeSpec(
        key=item.key,
        task=task,
        seed=item.seed,
        model=item.label,
        scaffold=item.scaffold,
        out_dir=edir,
        instruction=sandbox.instruction(),
        max_iterations=ctx.config.max_iterations or task.limits.max_iterations,
        temperature=ctx.config.temperature,
        max_output_tokens=ctx.config.max_output_tokens,
        time_limit_s=task.limits.agent_timeout_s,
        checkpoint=checkpoint,
    )
    watch = WatchConfig(
        watch=not arm.runner.watches_loops,
        loop=ctx.config.loop,
        actions=arm.scaffold.actions,
        aliases=arm.schemas.aliases,
    )
    ended_stopped = False
    steps: list[StepResult] | None = None
    try:
        if task.steps:
            outcome, steps = _run_steps(ctx, item, arm, spec, sandbox, watch)
        else:
            outcome = _agent(ctx, item, arm, spec, sandbox, watch)
        ended_stopped = outcome.stopped
    except OSError as exc:  # the episode's own files (a full disk): the infrastructure's failure
        if not disk_full(exc):
            raise
        outcome = failed_outcome("the episode's files could not be written", exc, started)
    except CheckpointUnusable as exc:  # the runner could not take its state back: from turn 1 next
        set_aside(edir)
        ctx.resume_notes[item.key] = f"{exc}; the episode began again from turn 1"
        outcome = failed_outcome("the episode's checkpoint could not be restored", exc, started)
    finally:
        ctx.untrack(item.key)
        # the final files exported, the sandbox kept for verification (a stopped episode: not
        # recorded, it goes on from its checkpoint next time; nothing to export)
        if checkpoint is not None:
            checkpoint.finish_saves()  # while the sandbox still runs
        too_big = None if ended_stopped else _finish(sandbox)
    outcome = with_checkpoint(outcome, checkpoint, ctx.resume_notes.get(item.key))
    if too_big is not None:  # the agent's doing: scored, and not run again
        outcome = outcome.model_copy(
            update={"status": "error", "error_type": "ExportLimit", "error": str(too_big), "infra": False}
        )
    if steps is not None:  # verified step by step already: nothing left to do in the sandbox
        sandbox.close()
        return outcome, None, steps
    return outcome, sandbox, None


def _agent(
    ctx: Rollout, item: Pending, arm: Arm, spec: EpisodeSpec, sandbox: EpisodeSandbox, watch: WatchConfig
) -> EpisodeOutcome:
    """The scaffold's runner on ``spec`` in ``sandbox``, its model calls through the run's proxy
    (watched there when the runner does not watch its own loops)."""
    # one file of the episode's model calls, whichever step made them
    record = ctx.store.episode_dir(item.label, item.task.id, item.seed) / MODEL_CALLS
    endpoint = ctx.proxy().episode(item.key, watch, record=record, upstream=item.endpoint)
    try:
        outcome = arm.runner.run(spec, sandbox, endpoint, ctx.stop)
    finally:
        endpoint.release()
    return _watched(outcome, endpoint.watch) if watch.watch else outcome


def _run_steps(
    ctx: Rollout, item: Pending, arm: Arm, spec: EpisodeSpec, sandbox: EpisodeSandbox, watch: WatchConfig
) -> tuple[EpisodeOutcome, list[StepResult]]:
    """A multi-step task (harness/tasks/steps.py): a new run of the scaffold per step in the one
    sandbox, each step verified there before the next; one outcome of them all (their turns one
    after the other, the first loop found), the steps' results for the record."""
    edir = spec.out_dir
    outcomes: list[EpisodeOutcome] = []

    def act(step: StepSpec) -> str | None:
        item.endpoint.ensure_up()  # a step's tests may have outlasted the server's idle time
        # each step's agent writes its own files (a scaffold's trajectory, conversation) apart
        step_spec = spec.model_copy(
            update={
                "task": step_task(item.task, step),
                "instruction": step.instruction,
                "out_dir": edir / STEPS_DIR / step.name,
                "time_limit_s": step.agent_timeout_s or spec.time_limit_s,
                "checkpoint": None,  # a step's turns are not checkpointed: an interrupted episode begins again
            }
        )
        outcome = _agent(ctx, item, arm, step_spec, sandbox, watch)
        outcomes.append(outcome)
        if outcome.stopped or outcome.infra or outcome.status == "error":
            return outcome.error or "the step's agent ended in an error"
        return None

    results, ended = run_steps(item.task, sandbox, act, logs=edir / STEPS_DIR, stop=ctx.stop)
    offset = 0
    placed = []
    for i, r in enumerate(results):
        n = len(outcomes[i].turns) if i < len(outcomes) else 0
        placed.append(r.model_copy(update={"first_turn": offset, "turns": n}))
        offset += n
    if ctx.stop.is_set():
        if not any(o.stopped for o in outcomes):
            outcomes.append(EpisodeOutcome(status="error", turns=[], stopped=True))
    elif ended is not None and len(outcomes) == len(results):  # its setup or healthcheck failed
        outcomes.append(EpisodeOutcome(status="error", turns=[], error=ended, error_type="StepSetup"))
    return _joined(outcomes), placed


def _joined(outcomes: list[EpisodeOutcome]) -> EpisodeOutcome:
    """The steps' outcomes as one episode's: turns numbered on, tokens and times summed, the last
    step's ending unless an earlier step's loop or (scaffold) stop said more."""
    turns: list[Turn] = []
    loop = None
    for o in outcomes:
        base = len(turns)
        turns += [t.model_copy(update={"index": base + j}) for j, t in enumerate(o.turns)]
        if loop is None and o.loop is not None:
            loop = o.loop.model_copy(
                update={"start_turn": o.loop.start_turn + base, "detected_at": o.loop.detected_at + base}
            )
    last = outcomes[-1] if outcomes else EpisodeOutcome(status="finished", turns=[])
    looped = next((o for o in outcomes if o.status in ("loop_stopped", "stuck")), None)
    status = last.status
    if looped is not None and last.status not in ("error",):
        status = looped.status
    return last.model_copy(
        update={
            "status": status,
            "turns": turns,
            "loop": loop,
            "wall_s": sum(o.wall_s for o in outcomes),
            "llm_s": sum(o.llm_s for o in outcomes),
            "prompt_tokens": sum(o.prompt_tokens for o in outcomes),
            "completion_tokens": sum(o.completion_tokens for o in outcomes),
        }
    )


def _watched(outcome: EpisodeOutcome, watch: "EpisodeWatch") -> EpisodeOutcome:
    """A runner the proxy watched: its turns (the proxy's where it reports none) and, when the
    proxy stopped it on a loop, that loop as its outcome (a scaffold whose own ending was the
    proxy's answer reports no loop itself)."""
    update: dict[str, Any] = {}
    if not outcome.turns:
        update["turns"] = watch.turns
    if watch.loop is not None and outcome.loop is None and not outcome.infra and not outcome.stopped:
        update |= {"loop": watch.loop, "status": "loop_stopped", "error": None, "error_type": None}
    return outcome.model_copy(update=update) if update else outcome


def _finish(sandbox: EpisodeSandbox) -> ExportLimit | None:
    """``sandbox.finish()``; the export cap its final files went over, if they did."""
    try:
        sandbox.finish()
    except ExportLimit as exc:
        return exc
    return None


def run_attempts(ctx: Rollout, item: Pending) -> Finished | None:
    """The episode run to its outcome, wherever it runs (this process, or a Ray task).

    An infrastructure failure is retried (INFRA_RETRIES) once the endpoint is healthy again; an
    episode the run's stop interrupted returns None (it is not recorded).
    """
    retried: list[EpisodeError] = []
    for attempt in range(INFRA_RETRIES + 1):
        if ctx.drain.event.is_set():  # the run is stopping: nothing more starts
            return None
        outcome, sandbox, steps = _attempt(ctx, item)
        if ctx.stop.is_set() or outcome.stopped:  # this outcome may be cut short: not recorded
            if sandbox is not None:
                sandbox.close()
            ctx.drained += not ctx.stop.is_set()  # ended after its turn for a graceful stop
            return None
        if not outcome.infra or attempt == INFRA_RETRIES:
            break
        console.print(
            f"[yellow]{markup(item.task.id)} seed {item.seed}: infrastructure failure ({markup(outcome.error_type)}: "
            f"{markup((outcome.error or '')[:100])}); retry {attempt + 1} of {INFRA_RETRIES} once the server answers[/]",
            highlight=False,
        )
        # kept in the record: the retry's files replace this attempt's
        retried.append(EpisodeError(type=outcome.error_type or "Error", message=(outcome.error or "")[:2000]))
        if sandbox is not None:
            sandbox.close()
    ctx.resume_notes.pop(item.key, None)
    return Finished(item, outcome, sandbox, steps, tuple(retried))


def format_counts(
    outcome: EpisodeOutcome, schemas: ToolSchemas, *, allow_multiple: bool = False
) -> tuple[dict[str, int], dict[str, int], int]:
    """Format errors by category, the scaffold's silent repairs, and the tool calls of an episode."""
    errors: Counter[str] = Counter()
    repairs: Counter[str] = Counter()
    calls = 0
    for turn in outcome.turns:
        calls += len(turn.tool_calls)
        result = validate_turn(turn, schemas, allow_multiple=allow_multiple)
        errors.update(e.category.value for e in result.errors)
        repairs.update(f"{r.original}->{r.repaired}" for r in result.repairs)
    return dict(errors), dict(repairs), calls


def disk_full_error(exc: OSError, what: str) -> HarnessError:
    return HarnessError(
        f"disk full: {what} ({exc.strerror or exc}); free space and run the same command again "
        "(finished episodes are kept, unfinished ones run again)"
    )


def record_episode(ctx: Rollout, done: Finished) -> EpisodeRecord:
    """The driver's part: the trajectory and the record appended to the run (infra_error when the
    retries ran out)."""
    store, item, outcome, sandbox = ctx.store, done.item, done.outcome, done.sandbox
    task, seed = item.task, item.seed
    arm = ctx.arms[item.scaffold]
    # stuck: the scaffold's own loop detector stopped it (outcome.loop says what it saw)
    status = {"finished": "unresolved", "stuck": "loop_stopped"}.get(outcome.status, outcome.status)
    if outcome.infra:
        status = "infra_error"
    try:
        errors, repairs, calls = format_counts(
            outcome, arm.schemas, allow_multiple=arm.scaffold.parallel_tool_calls
        )
        traj = store.write_trajectory(store.trajectory_path(item.label, task.id, seed), outcome.turns)
        rec = EpisodeRecord(
            run_id=ctx.run_id,
            model=item.label,
            model_path=item.endpoint.path,
            scaffold=item.scaffold,
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
            stall=detect_stall(outcome.turns),
            tamper=tamper_findings(outcome.turns),
            last_error=last_error(outcome.turns),
            prompt_tokens=outcome.prompt_tokens,
            completion_tokens=outcome.completion_tokens,
            resumed_turns=outcome.resumed_turns,
            resume_note=outcome.resume_note,
            checkpoint_s=round(outcome.checkpoint_s, 4),
            retried=list(done.retried),
            wall_s=round(outcome.wall_s, 3),
            llm_s=round(outcome.llm_s, 3),
            error=EpisodeError(type=outcome.error_type or "Error", message=outcome.error or "")
            if status in ("error", "infra_error")
            else None,
            trajectory=traj,
            # an error is final; infra_error stays unverified (flagged, never scored) and reruns
            verified=status == "error",
            steps=done.steps,
        )
        if rec.verified:  # an error is final: its cause now
            rec = rec.model_copy(update={"failure": failure_of(rec)})
        store.append(rec)
        if status != "infra_error":  # final: its checkpoint is of no more use (an infra_error resumes)
            set_aside(store.episode_dir(item.label, task.id, seed))
    except OSError as exc:
        if sandbox is not None:
            sandbox.close()
        if disk_full(exc):
            raise disk_full_error(exc, f"the record of {item.key} could not be written") from None
        raise
    if status in ("error", "infra_error") and sandbox is not None:
        sandbox.close()  # nothing left to verify in it
    return rec
