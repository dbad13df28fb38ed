"""What a seed varies, said at the start of a run and measured after it.

Each episode's seed is sent to the server as the request's sampling seed. Above temperature 0 it
picks a different sample, so seeds measure the model's run-to-run spread. At temperature 0
decoding is greedy and the seed changes nothing: seeds then differ only through the server's own
nondeterminism (batching, floating-point order), and on one machine they usually produce the very
same episode — three seeds cost three times the GPU time and narrow nothing.

So the run states its sampling at the start (a warning for several seeds at temperature 0), and
the report counts, per task, how many seeds produced identical trajectories (the model's outputs
turn by turn) and the between-seed variance of the score actually observed; the power statement
(power.py) uses both.
"""

import hashlib
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

__all__ = ["SeedVariation", "TaskSeeds", "sampling_temperature", "seed_statement", "seed_variation"]

_MAX_TRAJECTORY_BYTES = 64 * 1024 * 1024  # larger files are not fingerprinted (their task: unknown)


def sampling_temperature(manifest: dict[str, Any]) -> float | None:
    """The temperature run.json says was sent, or None (a run made before it was recorded)."""
    sampling = manifest.get("sampling")
    value = sampling.get("temperature") if isinstance(sampling, dict) else None
    return float(value) if isinstance(value, int | float) else None


def seed_statement(sampling: dict[str, Any], seeds: int, runtime: str) -> tuple[str, str | None]:
    """(what is sent and what a seed varies, a warning or None), printed when `harness eval` starts.

    On the local runtime the prompt itself differs by seed: the file editor's tool description
    names the episode's own workspace directory (…/seedN/workspace), so seeds are not the same
    request even at temperature 0 (measured: three greedy seeds, three different episodes)."""
    t = float(sampling["temperature"])
    sent = (
        f"sampling: temperature {t:g}, top_p {sampling['top_p']:g}, up to {sampling['max_output_tokens']} "
        f"output tokens ({sampling['source']}); each episode's seed is sent as the request's sampling seed"
    )
    local = (
        "; on the local runtime each episode's workspace path is in the prompt, so seeds differ in "
        "their prompt too"
        if runtime in ("local", "bwrap") and seeds > 1
        else ""
    )
    if t > 0:
        return sent + f", so seeds sample different episodes at temperature {t:g}" + local, None
    if seeds < 2:
        return sent + " (at temperature 0 decoding is greedy: a seed changes nothing)", None
    return sent + local, (
        f"temperature 0 with {seeds} seeds: decoding is greedy, so the seeds differ only through the "
        "server's nondeterminism (batching, prefix-cache hits, floating-point order)"
        + (" and their workspace paths" if local else "")
        + " and mostly give identical episodes, which narrow nothing; more tasks would, or a temperature "
        "above 0 (--temperature 0.7) for seeds that vary. The report counts the identical seeds"
    )


class TaskSeeds(BaseModel):
    """One task's seeds: how many, how many distinct trajectories, the largest identical group."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    seeds: int
    distinct: int | None  # None: a trajectory could not be read, so unknown
    identical: int  # seeds in the largest group of identical trajectories (1: all differ)
    scores: list[float | None]


class SeedVariation(BaseModel):
    """How much one model's seeds varied (tasks with two or more seeds only)."""

    model_config = ConfigDict(frozen=True)

    temperature: float | None
    tasks: list[TaskSeeds]
    score_variance: float | None  # mean over tasks of the score's variance across seeds (ddof 1)
    outcome_differs: int  # tasks whose seeds did not all score the same

    @property
    def known(self) -> list[TaskSeeds]:
        return [t for t in self.tasks if t.distinct is not None]

    @property
    def identical_tasks(self) -> int:
        """Tasks all of whose seeds produced one and the same trajectory."""
        return sum(1 for t in self.known if t.distinct == 1)

    @property
    def all_identical(self) -> bool:
        """Every task with several seeds repeated one trajectory: the seeds bought nothing."""
        return bool(self.known) and self.identical_tasks == len(self.known)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def no_gain(self) -> str | None:
        """Why, by this run, more seeds would narrow nothing; None when they could.

        Identical episodes, or at temperature 0 the same score on every seed of every task (the
        seeds then differ only through the server; a prefix-cache hit on the second seed of a task
        can change a greedy output, yet not the outcome)."""
        if self.all_identical:
            return "every task's seeds gave identical episodes"
        if self.greedy and self.score_variance == 0 and self.outcome_differs == 0:
            return "at temperature 0 every task's seeds scored the same"
        return None

    def sentence(self) -> str:
        """E.g. "seeds identical on 3 of 3 tasks (3 seeds each; temperature 0); between-seed variance 0"."""
        if not self.tasks:
            return "one seed per task: no between-seed variation to measure"
        seeds = sorted({t.seeds for t in self.tasks})
        each = f"{seeds[0]} seeds each" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]} seeds"
        temp = "" if self.temperature is None else f"; temperature {self.temperature:g}"
        known = self.known
        text = f"seeds identical on {self.identical_tasks} of {len(known)} tasks ({each}{temp})"
        if len(known) < len(self.tasks):
            text += f", {len(self.tasks) - len(known)} task(s) unknown (trajectory unreadable)"
        if self.score_variance is not None:
            text += (
                f"; between-seed variance of the score {self.score_variance:.3g} "
                f"({self.outcome_differs} of {len(self.tasks)} tasks scored differently across seeds)"
            )
        return text


# Record fields that follow from the model's outputs: seeds that differ in one of them differ.
_CHEAP_KEY = ["status", "turns", "tool_calls", "completion_tokens", "loop_kind", "loop_start"]


def seed_variation(root: Path, frame: pd.DataFrame, temperature: float | None) -> SeedVariation:
    """Seeds of one model's episodes (``frame``: rows of RunData.episodes) compared task by task.

    Trajectories are compared by the model's outputs (text, tool calls, finish reason), not the
    observations, which carry times and process ids. The record fields that follow from the
    outputs are compared first: only seeds that agree on all of them have their trajectory files
    read (on 100,000 records this is a fraction of a second).
    """
    live = frame[frame["status"] != "infra_error"]
    multi = live[live.groupby("task_id")["seed"].transform("size") >= 2]
    if multi.empty:
        return SeedVariation(temperature=temperature, tasks=[], score_variance=None, outcome_differs=0)
    key = multi.groupby(["task_id", *_CHEAP_KEY], dropna=False, sort=False).ngroup()
    shared = (key.map(key.value_counts()) >= 2).to_numpy()
    score = multi["reward"].where(multi["verified"]).astype(float)
    # Plain arrays, task by task (a pandas groupby loop cost 0.5 s on 50,000 episodes).
    order = np.lexsort((multi["seed"].to_numpy(), multi["task_id"].to_numpy()))
    task_ids = multi["task_id"].to_numpy()[order]
    keys, shared = key.to_numpy()[order], shared[order]
    paths, scores = multi["trajectory"].to_numpy()[order], score.to_numpy()[order]
    cuts = [0, *(np.flatnonzero(task_ids[1:] != task_ids[:-1]) + 1).tolist(), len(task_ids)]
    tasks: list[TaskSeeds] = []
    for lo, hi in pairwise(cuts):
        prints: dict[str, int] = {}
        known = True
        for i in range(lo, hi):
            fp = _fingerprint(root, str(paths[i])) if shared[i] else f"key-{keys[i]}"
            if fp is None:
                known = False
                break
            prints[fp] = prints.get(fp, 0) + 1
        tasks.append(
            TaskSeeds(
                task_id=str(task_ids[lo]),
                seeds=hi - lo,
                distinct=len(prints) if known else None,
                identical=max(prints.values()) if known else 1,
                scores=[None if np.isnan(x) else float(x) for x in scores[lo:hi]],
            )
        )
    scored = multi.assign(_score=score).dropna(subset=["_score"]).groupby("task_id")["_score"]
    stats = scored.agg(["var", "count", "nunique"])
    stats = stats[stats["count"] >= 2]
    return SeedVariation(
        temperature=temperature,
        tasks=tasks,
        score_variance=float(stats["var"].mean()) if len(stats) else None,
        outcome_differs=int((stats["nunique"] > 1).sum()),
    )


def _fingerprint(root: Path, trajectory: str) -> str | None:
    """A hash of the model's outputs in the episode's trajectory (None: no readable trajectory)."""
    from harness.monitor import Turn

    if not trajectory:
        return None
    path = (root / trajectory).resolve()
    try:
        if not path.is_relative_to(root.resolve()) or path.stat().st_size > _MAX_TRAJECTORY_BYTES:
            return None
        lines = path.read_bytes().splitlines()
    except OSError:
        return None
    digest = hashlib.sha256()
    for line in lines:
        if not line.strip():
            continue
        try:
            turn = Turn.model_validate_json(line)
        except ValueError:
            return None
        calls = [(c.name, c.arguments) for c in turn.tool_calls]
        digest.update(repr((turn.text, calls, turn.finish_reason)).encode())
    return digest.hexdigest()
