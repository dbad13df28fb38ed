"""Phase 4 of `harness eval`: every finished episode's final files verified against its task's
hidden tests, on this machine's sandboxes (whatever executor ran the rollouts), no GPU needed.

Whatever the agent did to its workspace, verification returns: a workspace it wrecked is
verified from the starting files plus what is left (the reason in ``error``), a verification that
fails outright scores 0 with the reason, and the run never stops here. Records are appended here
alone, as each verification ends. A multi-step task's steps were verified during its rollout (each
before the next step's agent, as Harbor does): its reward comes from their results here.
"""

import contextlib
import threading
from typing import Any

from harness._text import markup
from harness.episodes.faults import disk_full
from harness.executor import ThreadExecutor
from harness.progress import progress_bar
from harness.results.failures import failure_of
from harness.results.store import EpisodeError, EpisodeRecord, RunStore
from harness.rollout import episode_key
from harness.runtime.base import Runtime
from harness.tasks import Task
from harness.tasks.fresh import verify_mode
from harness.tasks.steps import STEPS_DIR, summary
from harness.tasks.steps import verdict as steps_verdict
from harness.tasks.verify import kill_running_tests


def verify_run(
    store: RunStore, tasks: dict[str, Task], runtime: Runtime, concurrency: int, stop: threading.Event
) -> None:
    """Every recorded episode not yet verified (infra_error ones stay unscored)."""
    todo = [
        r
        for r in store.records().values()
        if not r.verified and r.status != "infra_error" and r.task_id in tasks
    ]
    if not todo:
        return
    # As many at once as episodes ran: a container's verification is mostly waiting on the
    # engine (start, exec, copy, remove); one at a time it was a serial tail after the rollouts.
    runtime.expect_verifications([tasks[r.task_id] for r in todo if r.steps is None], concurrency)
    work = ThreadExecutor().run(
        lambda rec: verified(rec, tasks[rec.task_id], store, runtime), todo, concurrency, stop
    )
    name_model = len({r.model for r in todo}) > 1
    try:
        with progress_bar("verification", len(todo)) as bar:
            for rec in work:
                store.append(rec)
                bar.advance()
                bar.print(markup(verified_line(rec, name_model)))
    except BaseException:  # a stop: the tests running in the workers end with it
        kill_running_tests()
        runtime.halt()
        raise
    finally:
        runtime.cool_down()  # fresh sandboxes started ahead that no verification took


def verified(rec: EpisodeRecord, task: Task, store: RunStore, runtime: Runtime) -> EpisodeRecord:
    """``rec`` with its reward (module docstring: this always returns)."""
    edir = store.episode_dir(rec.model, rec.task_id, rec.seed)
    note: str | None = None
    tampering: str | None = None
    mode = verify_mode(task)
    try:
        if rec.steps is not None:  # a multi-step task: its steps were verified as they ran
            result = steps_verdict(task, rec.steps, edir / STEPS_DIR)
        else:
            sandbox = runtime.reopen(task, edir, episode_key(rec.model, rec.task_id, rec.seed))
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
    done = rec.model_copy(update={**update, "failure": None})  # decided again from this verification
    return done.model_copy(update={"failure": failure_of(done, output)})


def verified_line(rec: EpisodeRecord, name_model: bool) -> str:
    """The outcome, once the tests have run on the episode's workspace."""
    who = f"{rec.model} " if name_model else ""
    reward = "-" if rec.reward is None else f"{rec.reward:g}"
    outcome = "resolved" if rec.status == "resolved" or rec.reward == 1.0 else "unresolved"
    also = f", {rec.status}" if rec.status not in ("resolved", "unresolved") else ""
    note = f" — {rec.error.message[:200]}" if rec.error and rec.error.type == "VerifyWorkspace" else ""
    steps = f"; steps: {summary(rec.steps)}" if rec.steps is not None else ""
    return f"  {who}{rec.task_id} seed {rec.seed}: verified {outcome} (reward {reward}{also}{steps}){note}"
