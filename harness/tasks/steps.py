"""Harbor's multi-step tasks (``[[steps]]`` in task.toml, ``steps/<name>/``), run as Harbor's
``MultiStepTrial`` (harbor 0.25.0, harbor/trial/multi_step.py) runs them.

One environment (the task's container) for all steps, in order. Per step: the previous step's
tests and verifier logs removed (the agent never sees them), ``steps/<name>/workdir/`` copied into
the working directory and its ``setup.sh`` run, the step's healthcheck; then a **new agent run**
on the step's instruction (Harbor starts a new session per step unless an agent resumes its
trajectory; none of the harness's scaffolds do), whatever the earlier steps left in the
environment still there; then the step's verifier in that same container (Harbor's shared mode):
the task's ``tests/`` with the step's ``tests/`` over it at ``/tests``, with the step's verifier
timeout and env. A step whose rewards miss its ``min_reward`` (a number gates ``reward``; a table
gates each key; a missing key or verifier result counts as -inf), or whose verifier gave no result,
ends the trial: the later steps never run. The trial's rewards: ``multi_step_reward_strategy``
``mean`` (per-key means over the steps that have a verifier result, a key missing from a step
counted 0; Harbor's default) or ``final`` (the last step run's rewards as they are).

The harness's own rules stay: a step whose agent run ends in an error (its time limit, a broken
sandbox) or an infrastructure failure ends the episode as that error, as for single-step tasks;
the run's stop ends it unrecorded. ``tasks verify`` runs each step's reference solution
(``steps/<name>/solution/solve.sh``, else the task's ``solution/solve.sh``, as Harbor's oracle)
before that step's tests.
"""

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import HarnessError
from harness.tasks.harbor_config import StepSpec
from harness.tasks.loader import Task
from harness.tasks.verify import VerifyResult

STEPS_DIR = "steps"  # under an episode's directory: each step's agent files and verifier.log


class StepResult(BaseModel):
    """One step of a multi-step episode, as the record keeps it."""

    model_config = ConfigDict(frozen=True)

    name: str
    rewards: dict[str, float] | None = Field(
        None, description="What the step's verifier wrote (reward.txt: 'reward'); None: no verifier result."
    )
    first_turn: int = Field(0, description="Index of the step's first turn in the episode's trajectory.")
    turns: int = Field(0, description="Turns of the step's agent run.")
    note: str | None = Field(None, description="Why the trial ended after this step, or what went wrong.")


@runtime_checkable
class StepSandbox(Protocol):
    """What a sandbox does for the steps of a multi-step task (the docker runtime's containers)."""

    def begin_step(self, step: StepSpec, first: bool) -> None:
        """Before the step's agent: the previous step's tests and verifier logs gone, the step's
        workdir/ copied in, its setup.sh run, its healthcheck passed; HarnessError otherwise."""
        ...

    def run_step_solution(self, step: StepSpec) -> tuple[bool, str]:
        """The step's reference solution, as Harbor's oracle runs it; (ok, output tail)."""
        ...

    def verify_step(self, step: StepSpec) -> VerifyResult:
        """The task's tests/ with the step's tests/ over it, run here as Harbor's shared verifier."""
        ...


def step_task(task: Task, step: StepSpec) -> Task:
    """``task`` as the step's agent sees it: the step's instruction and agent time limit."""
    limits = task.limits.model_copy(
        update={"agent_timeout_s": step.agent_timeout_s or task.limits.agent_timeout_s}
    )
    return task.model_copy(update={"instruction": step.instruction, "limits": limits})


def min_reward_failure(
    rewards: dict[str, float] | None, min_reward: float | dict[str, float] | None
) -> str | None:
    """Why ``rewards`` miss ``min_reward`` (Harbor's rule), or None when they meet it."""
    if min_reward is None:
        return None
    thresholds = {"reward": float(min_reward)} if isinstance(min_reward, int | float) else min_reward
    for key, threshold in thresholds.items():
        actual = rewards.get(key, float("-inf")) if rewards else float("-inf")
        if actual < threshold:
            return f"{key}={actual:g} below min_reward {threshold:g}: the remaining steps are not run"
    return None


def trial_rewards(strategy: str, results: list[StepResult]) -> dict[str, float] | None:
    """The trial's rewards from its steps' (Harbor's ``_select_multi_step_reward``)."""
    if not results:
        return None
    if strategy == "final":
        return results[-1].rewards
    valid = [r.rewards for r in results if r.rewards is not None]
    keys = {k for rewards in valid for k in rewards}
    if not keys:
        return None
    return {k: sum(rewards.get(k, 0.0) for rewards in valid) / len(valid) for k in sorted(keys)}


def scalar(rewards: dict[str, float] | None) -> float:
    """The episode's one reward: ``reward``, else the mean of the keys (the single-step rule of
    harbor.read_reward); 0 without any."""
    if not rewards:
        return 0.0
    if "reward" in rewards:
        return rewards["reward"]
    return sum(rewards.values()) / len(rewards)


def run_steps(
    task: Task,
    sandbox: object,
    act: Callable[[StepSpec], str | None],
    *,
    logs: Path | None = None,
    stop: threading.Event | None = None,
) -> tuple[list[StepResult], str | None]:
    """Every step of ``task`` in ``sandbox`` (module docstring): ``act(step)`` runs its agent (or
    solution) and returns None, or why the episode ends there unverified. The steps' results, and
    that reason (None: the trial ran to its end or a min_reward ended it). Each step's verifier
    output goes to ``logs/<name>/verifier.log``."""
    if not isinstance(sandbox, StepSandbox):
        raise HarnessError(f"{task.id}: a multi-step task runs in its container (--runtime docker)")
    results: list[StepResult] = []
    for i, step in enumerate(task.steps):
        if stop is not None and stop.is_set():
            return results, "the run stopped"
        try:
            sandbox.begin_step(step, first=i == 0)
        except Exception as exc:
            return results, f"step {step.name!r}: {exc}"
        ended = act(step)
        if ended is not None:
            return results, ended
        try:
            verdict = sandbox.verify_step(step)
        except Exception as exc:  # no verifier result: Harbor ends the trial here
            note = f"verification failed: {type(exc).__name__}: {exc}"[:2000]
            _write(logs, step, f"[harness] {note}\n")
            results.append(StepResult(name=step.name, note=note))
            break
        _write(logs, step, verdict.output)
        rewards = verdict.rewards or {"reward": verdict.reward}
        failure = min_reward_failure(rewards, step.min_reward)
        results.append(StepResult(name=step.name, rewards=rewards, note=failure))
        if failure is not None:
            break
    return results, None


def _write(logs: Path | None, step: StepSpec, text: str) -> None:
    if logs is None:
        return
    path = logs / step.name / "verifier.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", errors="replace")


def verdict(task: Task, results: list[StepResult], logs: Path | None = None) -> VerifyResult:
    """The trial's verification from its steps' results (the strategy's rewards, one number), its
    output the steps' verifier logs one after the other."""
    rewards = trial_rewards(task.harbor.reward_strategy if task.harbor else "mean", results)
    reward = scalar(rewards)
    parts = []
    for r in results:
        got = ", ".join(f"{k} {v:g}" for k, v in (r.rewards or {}).items()) or "no verifier result"
        text = ""
        if logs is not None and (logs / r.name / "verifier.log").is_file():
            text = (logs / r.name / "verifier.log").read_text(errors="replace")
        parts.append(f"==== step {r.name}: {got}{f' ({r.note})' if r.note else ''}\n{text}")
    strategy = task.harbor.reward_strategy if task.harbor else "mean"
    parts.append(f"[harness] {len(results)} of {len(task.steps)} steps run; {strategy}: reward {reward:g}\n")
    output = "\n".join(parts)
    return VerifyResult(
        resolved=reward >= 1.0,
        reward=reward,
        exit_code=None,
        timed_out=False,
        seconds=0.0,
        output_tail=output[-2000:],
        output=output,
        rewards=rewards or {},
    )


def summary(results: list[StepResult]) -> str:
    """``one 1, two 0`` for a progress line."""
    return ", ".join(f"{r.name} {'-' if r.rewards is None else f'{scalar(r.rewards):g}'}" for r in results)
