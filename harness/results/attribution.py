"""Is it the model or the scaffold? One model under two scaffolds, in one plain sentence.

The question a base model that loops under OpenHands raises: is the model at fault, or the
tool-call orchestration (chat template, parser, scaffold)? Run the same model on the same tasks and
seeds under a second scaffold (mini-swe-agent's text actions involve no tool-call parser) and pair
them: for each behaviour (loops, format errors) each task's share of episodes that show it under A
and under B, paired by task with the comparison's own test (``paired_difference``: McNemar exact
with one seed, the exact sign-flip test on seed-averaged shares).

- the behaviour differs significantly and the scaffold with less of it has under half the other's
  rate: it follows that scaffold (the other one does not make the model do it);
- significantly different but both scaffolds show much of it: it follows the model, and one
  scaffold adds to it;
- not significantly different, both at similar rates: it follows the model; the sentence says how
  large a scaffold effect the tasks could still hide (the gate's bounds, harness/results/gate.py);
- not significantly different yet mostly under one scaffold: it points to that scaffold, but the
  tasks are too few to establish it (an exact two-sided test needs 6 tasks that all move the same
  way to reach p < 0.05: with the 3 smoke tasks no result can be significant);
- under neither scaffold: nothing to attribute.
"""

import math
from typing import Literal, NamedTuple

import pandas as pd
from pydantic import BaseModel, ConfigDict

from harness.results.gate import bounds
from harness.results.stats import paired_difference

Behaviour = Literal["loops", "format errors"]
Cause = Literal["scaffold", "model", "both", "neither"]

SIGNIFICANT = 0.05
# With every task moving the same way, an exact two-sided test reaches p = 2 / 2^n: n = 6 is the
# first below 0.05.
MIN_TASKS = 6
# A scaffold effect the tasks could hide, above which "the model" is said to rest on thin evidence.
THIN = 0.25
# "Mostly under one scaffold": the other's rate is under this share of it.
MOSTLY = 0.5

# (what an episode does, what the model does, what it does not)
_VERBS: dict[Behaviour, tuple[str, str, str]] = {
    "loops": ("loop", "loops", "does not loop"),
    "format errors": ("make format errors", "makes format errors", "makes no format errors"),
}


class ScaffoldPair(NamedTuple):
    """One model under two scaffolds: what a scaffold comparison pairs."""

    model: str
    a: str
    b: str


class Finding(BaseModel):
    """Where one behaviour comes from: its share of episodes under each scaffold, the paired test
    on the per-task shares, and the cause read from them."""

    model_config = ConfigDict(frozen=True)

    behaviour: Behaviour
    tasks: int
    rate_a: float  # share of A's episodes that show it
    rate_b: float
    diff: float  # mean over tasks of B's share - A's
    p_value: float
    test: str
    cause: Cause
    scaffold: str | None  # the scaffold it follows (cause scaffold or both), else None
    established: bool  # False: the tasks are too few to be sure (the clause says so)
    unseen: float | None  # the largest scaffold effect the tasks could hide (None: no bound)
    clause: str


class Attribution(BaseModel):
    """Loops and format errors of one model under two scaffolds, and the sentence that says which
    of the two they follow."""

    model_config = ConfigDict(frozen=True)

    model: str
    scaffold_a: str
    scaffold_b: str
    loops: Finding
    format_errors: Finding
    sentence: str


def _shares(frame: pd.DataFrame, behaviour: Behaviour) -> pd.Series:
    """Per task, the share of its episodes that show the behaviour."""
    if behaviour == "loops":
        shows = frame["loop_kind"].notna()
    else:
        shows = frame["format_errors"].map(lambda d: bool(d and sum(d.values())))
    return shows.astype(float).groupby(frame["task_id"]).mean()


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _hint(scaffold: str) -> str:
    """Where to look in a scaffold that makes the model loop or err: its tool-call orchestration,
    or for a text-action scaffold its prompts and action format."""
    from harness.episodes.scaffold import load_scaffold
    from harness.errors import HarnessError

    try:
        native = load_scaffold(scaffold).native_tool_calling
    except (HarnessError, OSError, ValueError):
        return f"check {scaffold}'s orchestration (prompts, templates, parsing)"
    if native:
        return f"check {scaffold}'s tool-call orchestration (chat template, tool-call parser, tool schemas)"
    return f"check {scaffold}'s prompts and action format (how it asks for a command and parses it)"


def _tasks(n: int) -> str:
    return f"{n} task{'' if n == 1 else 's'}"


def _cause(rate_a: float, rate_b: float, p: float, unseen: float | None) -> tuple[Cause, bool]:
    """The cause the rates and the test point to, and whether the tasks establish it."""
    r_hi, r_lo = max(rate_a, rate_b), min(rate_a, rate_b)
    significant = p < SIGNIFICANT
    if r_hi == 0:
        return "neither", True
    if r_lo < MOSTLY * r_hi:
        return "scaffold", significant
    if significant:
        return "both", True
    return "model", unseen is not None and unseen <= THIN


def finding(ea: pd.DataFrame, eb: pd.DataFrame, pair: ScaffoldPair, behaviour: Behaviour) -> Finding:
    """One behaviour of ``pair.model``: A's episodes ``ea`` and B's ``eb``, on the same tasks."""
    sa, sb = _shares(ea, behaviour), _shares(eb, behaviour)
    tasks = sorted(set(sa.index) & set(sb.index))
    rate_a = _episode_rate(ea[ea["task_id"].isin(tasks)], behaviour)
    rate_b = _episode_rate(eb[eb["task_id"].isin(tasks)], behaviour)
    paired = paired_difference(sa.loc[tasks].tolist(), sb.loc[tasks].tolist())
    found = bounds(paired.mean, paired.se, paired.ci_low, paired.ci_high, len(tasks))
    unseen = max(abs(found[0]), abs(found[1])) if found else None
    if unseen is not None and math.isnan(unseen):
        unseen = None
    cause, established = _cause(rate_a, rate_b, paired.p_value, unseen)
    hi, lo = (pair.a, pair.b) if rate_a >= rate_b else (pair.b, pair.a)
    r_hi, r_lo = max(rate_a, rate_b), min(rate_a, rate_b)
    episodes_do, model_does, does_not = _VERBS[behaviour]
    n = len(tasks)
    same = f"same model, same {_tasks(n)}"
    test = f"{100 * paired.mean:+.0f} points, p = {paired.p_value:.2g}, {paired.test}"
    both = f"{_pct(rate_a)} of {pair.a}'s episodes {episodes_do}, {_pct(rate_b)} of {pair.b}'s"
    if cause == "neither":
        clause = f"{pair.model} {does_not} under either scaffold (same {_tasks(n)})"
    elif cause == "scaffold":
        verb = "follow" if established else "point to"
        under_lo = f"{model_does} less" if r_lo else does_not
        clause = (
            f"the {behaviour} {verb} the scaffold ({hi}), not the model: {_pct(r_hi)} of {hi}'s episodes "
            f"{episodes_do} against {_pct(r_lo)} of {lo}'s ({same}; {test}); under {lo} the model "
            f"{under_lo}: {_hint(hi)}"
        )
        if not established:
            clause += (
                f"; but {_tasks(n)} cannot establish it (p < {SIGNIFICANT:g} takes at least {MIN_TASKS} tasks "
                "that all move the same way): run more tasks"
                if n < MIN_TASKS
                else f"; but the difference is not significant on {_tasks(n)}: run more tasks or seeds"
            )
    elif cause == "both":
        clause = (
            f"the {behaviour} follow the model, and the scaffold {hi} adds to them: the model {model_does} "
            f"under both scaffolds ({both}; {same}), more under {hi} ({test}): {_hint(hi)}"
        )
    else:
        clause = (
            f"the {behaviour} follow the model, not the scaffold: the model {model_does} under both scaffolds "
            f"({both}; {same}; no significant difference: {test})"
        )
        if established:
            clause += f"; a scaffold effect over {100 * (unseen or 0):.0f} points is ruled out (95%)"
        else:
            reach = f"up to {100 * unseen:.0f} points" if unseen is not None else "of any size"
            clause += f"; but on {_tasks(n)} a scaffold effect {reach} could go unseen: run more tasks to rule one out"
    return Finding(
        behaviour=behaviour,
        tasks=n,
        rate_a=rate_a,
        rate_b=rate_b,
        diff=paired.mean,
        p_value=paired.p_value,
        test=paired.test,
        cause=cause,
        scaffold=hi if cause in ("scaffold", "both") else None,
        established=established,
        unseen=unseen,
        clause=clause,
    )


def _episode_rate(frame: pd.DataFrame, behaviour: Behaviour) -> float:
    if not len(frame):
        return 0.0
    if behaviour == "loops":
        return float(frame["loop_kind"].notna().mean())
    return float(frame["format_errors"].map(lambda d: bool(d and sum(d.values()))).mean())


def attribute(ea: pd.DataFrame, eb: pd.DataFrame, pair: ScaffoldPair) -> Attribution:
    """Whether ``pair.model``'s loops and format errors follow scaffold A, B, or the model, from
    its episodes under A (``ea``) and under B (``eb``) on the tasks both scored."""
    loops = finding(ea, eb, pair, "loops")
    errors = finding(ea, eb, pair, "format errors")
    if loops.cause == errors.cause == "neither":
        sentence = (
            f"{pair.model} neither loops nor makes format errors under {pair.a} or {pair.b} "
            f"(same {_tasks(loops.tasks)}): nothing to attribute to the model or the scaffold."
        )
    else:
        first, second = loops.clause, errors.clause
        sentence = f"{first[0].upper()}{first[1:]}; {second}."
    return Attribution(
        model=pair.model,
        scaffold_a=pair.a,
        scaffold_b=pair.b,
        loops=loops,
        format_errors=errors,
        sentence=sentence,
    )
