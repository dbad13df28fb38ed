"""Base vs fine-tuned: paired per-task differences, their uncertainty, and the tasks that flipped.

The task is the unit of analysis: seeds are averaged within a task, then the per-task
differences (B - A) are paired. Runs whose task sets or scaffolds differ are not comparable
unless forced, in which case only the common tasks are compared and the output says so.
"""

import math

import pandas as pd
from pydantic import BaseModel, ConfigDict, computed_field

from harness.errors import HarnessError
from harness.results._gc import gc_paused
from harness.results.attribution import Attribution, ScaffoldPair, attribute
from harness.results.gate import GateResult
from harness.results.manifest import compare_differences
from harness.results.metrics import FORMAT_CATEGORIES, expand_counts, scored
from harness.results.power import Power, paired_power, paired_spread
from harness.results.runs import RunData
from harness.results.seeds import SeedVariation, sampling_temperature, seed_variation
from harness.results.stats import paired_difference


class Flip(BaseModel):
    model_config = ConfigDict(frozen=True)

    task_id: str
    a: float
    b: float


class OutcomeChange(BaseModel):
    """A task that did not flip but whose loop or format-error outcome moved: the share of its
    episodes that looped, and that made a format error, in A and in B."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    loop_a: float
    loop_b: float
    format_a: float
    format_b: float

    def what(self) -> str:
        parts = []
        if self.loop_a != self.loop_b:
            parts.append(f"loops {100 * self.loop_a:.0f}% -> {100 * self.loop_b:.0f}%")
        if self.format_a != self.format_b:
            parts.append(f"format errors {100 * self.format_a:.0f}% -> {100 * self.format_b:.0f}%")
        return ", ".join(parts) + " of episodes"


class OneSided(BaseModel):
    """A task scored in one run only: the other lost it (infra_error, not verified, no episode)."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    a: float | None  # the side's mean score; None where it has none
    b: float | None
    why: str  # what the unscored side has instead, e.g. "B: infra_error"


class CauseMove(BaseModel):
    """One failure cause in A and in B, paired by task: its episodes on each side, the tasks where
    A had it and B does not (B fixed it there) and the tasks where B has it and A did not (added)."""

    model_config = ConfigDict(frozen=True)

    cause: str
    a: int
    b: int
    fixed: int
    added: int


def _causes_sentence(moves: list[CauseMove]) -> str:
    """The largest move in why episodes failed, in one sentence (and the largest move the other
    way, when there is one)."""
    moved = [m for m in moves if m.a != m.b or m.fixed or m.added]
    if not moved:
        return "Why episodes failed did not move: the same causes on the same tasks in A and B."

    def size(m: CauseMove) -> tuple[int, int]:
        return abs(m.b - m.a), m.fixed + m.added

    top = max(moved, key=size)

    def words(m: CauseMove) -> str:
        eps = "episode" if m.b == 1 else "episodes"
        return (
            f"{m.cause.replace('_', ' ')}, {m.a} -> {m.b} {eps} "
            f"(B has it on {m.fixed} task(s) fewer and {m.added} more)"
        )

    sentence = f"The largest move in why episodes failed: {words(top)}"
    other = [m for m in moved if (m.b - m.a) * (top.b - top.a) < 0]
    if other:
        second = max(other, key=size)
        sentence += f"; the largest the other way: {words(second)}"
    return sentence + "."


class RateChange(BaseModel):
    model_config = ConfigDict(frozen=True)

    a: float
    b: float
    diff: float


class Comparison(BaseModel):
    model_config = ConfigDict(frozen=True)

    a: str  # "run:model"
    b: str
    model_a: str
    model_b: str
    tasks: int
    seeds_a: int
    seeds_b: int
    rate_a: float
    rate_b: float
    diff: float
    se: float
    ci_low: float
    ci_high: float
    p_value: float
    test: str
    fixed: list[Flip]  # B better than A on the task
    broken: list[Flip]  # B worse
    changed: list[OutcomeChange] = []  # not flipped, but the loop or format-error outcome moved
    # Tasks of both runs left out of B - A because one side (or both) has no score: a side that
    # lost a task must not move the difference unseen, so they are listed and the gate cannot PASS.
    one_sided: list[OneSided] = []
    unscored: list[str] = []  # no score on either side
    both_solved: int
    both_failed: int
    loop_rate: RateChange
    loop_rates: dict[str, RateChange]
    # episodes whose varied attempts kept getting the same failure back (not loops; not in loop_rate)
    stall_rate: RateChange | None = None
    # episodes with a tamper finding (evidence for the reader beside the score change, never a score)
    tamper_rate: RateChange | None = None
    format_errors_per_turn: dict[str, RateChange]
    # why the unresolved episodes failed (harness/monitor/failure.py), paired by task
    causes: list[CauseMove] = []
    power: Power
    notes: list[str]
    gate: GateResult | None = None  # set by with_gate()
    # One model under two scaffolds (A and B are MODEL@SCAFFOLD arms, or two runs' single scaffolds):
    # the scaffolds, and whether the loops and format errors follow a scaffold or the model.
    scaffold_a: str | None = None
    scaffold_b: str | None = None
    attribution: Attribution | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def causes_sentence(self) -> str:
        """The largest move in why episodes failed, in one sentence ("" without failures)."""
        return _causes_sentence(self.causes) if self.causes else ""

    def with_gate(self, *, max_drop: float | None = None, min_gain: float | None = None) -> "Comparison":
        """This comparison with the regression gate's verdict (thresholds as fractions)."""
        from harness.results.gate import gate

        result = gate(
            diff=self.diff,
            se=self.se,
            ci_low=self.ci_low,
            ci_high=self.ci_high,
            tasks=self.tasks,
            max_drop=max_drop,
            min_gain=min_gain,
            power_note=self.power.sentence(full=False),
            incomplete=self.incomplete_note(),
        )
        return self.model_copy(update={"gate": result})

    def incomplete_note(self) -> str:
        """The tasks left out for want of a score on a side, in words ("" when none)."""
        parts = []
        if self.one_sided:
            shown = ", ".join(f"{o.task_id} ({o.why})" for o in self.one_sided[:5])
            more = f" and {len(self.one_sided) - 5} more" if len(self.one_sided) > 5 else ""
            parts.append(f"{len(self.one_sided)} task(s) one-sided, scored in one run only: {shown}{more}")
        if self.unscored:
            shown = ", ".join(self.unscored[:5]) + (", ..." if len(self.unscored) > 5 else "")
            parts.append(f"{len(self.unscored)} task(s) scored in neither run: {shown}")
        return "; ".join(parts)

    def verdict(self) -> str:
        """One plain sentence: is the difference distinguishable from noise at the 5% level?"""
        sentence = self._verdict()
        if self.one_sided or self.unscored:
            left = len(self.one_sided) + len(self.unscored)
            sentence += f" [{left} task(s) left out: no score on one side or both, see above]"
        return sentence

    def _verdict(self) -> str:
        pts = f"{100 * self.diff:+.1f} points"
        if math.isnan(self.se):
            return f"B - A = {pts} on {self.tasks} task(s): too few tasks for an error bar"
        if self.se == 0:
            if self.diff == 0:
                return f"no difference: A and B scored the same on all {self.tasks} tasks"
            ci = "every task moved by the same amount, so no t interval"
        else:
            ci = f"95% CI {100 * self.ci_low:+.1f} to {100 * self.ci_high:+.1f}"
        if self.p_value < 0.05:
            better = "better" if self.diff > 0 else "worse"
            return f"B is {better} than A: {pts} ({ci}, p = {self.p_value:.3g}, {self.test})"
        return f"no significant difference: {pts} ({ci}, p = {self.p_value:.3g}, {self.test}); could be noise"


def pick_model(run: RunData, model: str | None, flag: str) -> str:
    models = run.models
    if model is not None:
        if model not in models:
            raise HarnessError(f"{flag} {model}: not in {run.root} (models there: {', '.join(models)})")
        return model
    if len(models) != 1:
        raise HarnessError(
            f"{run.root} holds {len(models)} models ({', '.join(models)}): pass {flag} to choose one"
        )
    return models[0]


def _check_comparable(
    a: RunData, b: RunData, force: bool, labels: tuple[str, str], scaffolds: ScaffoldPair | None
) -> list[str]:
    """What makes two runs' arms incomparable: other tasks, another scaffold (or its definition);
    in a comparison of scaffolds another model (its checkpoint path) instead."""
    differences: list[str] = []
    only_a = sorted(set(a.tasks) - set(b.tasks))
    only_b = sorted(set(b.tasks) - set(a.tasks))
    if only_a or only_b:
        differences.append(
            "task sets differ: "
            + "; ".join(
                f"{len(ts)} only in {run.name} ({', '.join(ts[:5])}{', ...' if len(ts) > 5 else ''})"
                for ts, run in ((only_a, a), (only_b, b))
                if ts
            )
        )
    if scaffolds is None:
        for key in ("scaffold", "scaffold_hash"):
            va, vb = a.manifest.get(key), b.manifest.get(key)
            if va != vb:
                differences.append(f"{key} differs: {va} vs {vb}")
                break
    else:  # the scaffolds differ on purpose; the model must not
        pa, pb = (_model_paths(run, label) for run, label in zip((a, b), labels, strict=True))
        if pa != pb:
            differences.append(f"the model differs: {', '.join(sorted(pa))} vs {', '.join(sorted(pb))}")
    refused, warned = compare_differences(
        a.manifest, labels[0], b.manifest, labels[1], scaffolds=scaffolds is not None
    )
    # the scaffold and the task ids are checked above; the manifests add the tasks' content and
    # each model's chat template, and what differs without making another experiment
    differences += [
        str(d) for d in refused if d.what != "scaffold" and not (d.what == "task set" and differences)
    ]
    if differences and not force:
        raise HarnessError(
            f"not comparable: {'; '.join(differences)}. Pass --force to compare the common tasks anyway"
        )
    return [f"forced: {d}" for d in differences] + [f"runs differ in {d.what}: {d}" for d in warned]


def _model_paths(run: RunData, label: str) -> set[str]:
    frame = run.episodes
    return {str(p) for p in frame.loc[frame["model"] == label, "model_path"].unique()}


def _scored(run: RunData, model: str) -> pd.DataFrame:
    done = scored(run.episodes[run.episodes["model"] == model])
    if len(done) and (done["status"] == "error").all():
        raise HarnessError(
            f"{run.name}:{model}: all {len(done)} episodes ended in error, so it has no resolve rate to compare; "
            f"see harness show {run.root} --status error"
        )
    return done


@gc_paused
def compare(
    a: RunData,
    b: RunData,
    model_a: str | None = None,
    model_b: str | None = None,
    *,
    force: bool = False,
    scaffolds: ScaffoldPair | None = None,
) -> Comparison:
    """Compare model_a of run a with model_b of run b (a and b may be the same run).

    ``scaffolds``: the two are one model under two scaffolds (harness/results/arms.py finds them);
    the runs' scaffolds then differ on purpose, and the comparison says whether the loops and format
    errors follow a scaffold or the model (harness/results/attribution.py)."""
    ma, mb = pick_model(a, model_a, "--model-a"), pick_model(b, model_b, "--model-b")
    if a is b and ma == mb:
        raise HarnessError(f"--model-a and --model-b are both {ma}: name two different models")
    notes = [] if a is b else _check_comparable(a, b, force, (ma, mb), scaffolds)
    notes += [f"{run.name}: {w}" for run in ([a] if a is b else [a, b]) for w in run.warnings]
    notes += [f"{run.name}: {run.selected}" for run in ([a] if a is b else [a, b]) if run.selected]
    da, db = _scored(a, ma), _scored(b, mb)
    ta, tb = (d.groupby("task_id")["score"].agg(["mean", "count"]) for d in (da, db))
    both = set(a.tasks) & set(b.tasks)
    common = sorted(set(ta.index) & set(tb.index) & both)
    one_sided = [
        OneSided(
            task_id=t,
            a=float(ta.loc[t, "mean"]) if t in ta.index else None,
            b=float(tb.loc[t, "mean"]) if t in tb.index else None,
            why=_why_unscored(b, mb, t, "B") if t in ta.index else _why_unscored(a, ma, t, "A"),
        )
        for t in sorted((set(ta.index) | set(tb.index)) & both - set(common))
    ]
    unscored = sorted(both - set(ta.index) - set(tb.index))
    if not common:
        raise HarnessError(
            f"no task has a scored episode in both {a.name}:{ma} and {b.name}:{mb}: nothing to compare"
        )
    sa, sb = ta.loc[common, "mean"].to_numpy(), tb.loc[common, "mean"].to_numpy()
    paired = paired_difference(sa.tolist(), sb.tolist())
    fixed = [Flip(task_id=t, a=float(x), b=float(y)) for t, x, y in zip(common, sa, sb, strict=True) if y > x]
    broken = [
        Flip(task_id=t, a=float(x), b=float(y)) for t, x, y in zip(common, sa, sb, strict=True) if y < x
    ]
    ea = a.episodes[(a.episodes["model"] == ma) & a.episodes["task_id"].isin(common)]
    eb = b.episodes[(b.episodes["model"] == mb) & b.episodes["task_id"].isin(common)]
    seeds_a, seeds_b = int(ea["seed"].nunique()), int(eb["seed"].nunique())
    if note := _seeds_note(seeds_a, seeds_b):
        notes.append(note)
    va = seed_variation(a.root, ea, sampling_temperature(a.manifest))
    vb = seed_variation(b.root, eb, sampling_temperature(b.manifest))
    no_gain, greedy = _seed_gain(va, vb)
    flipped = {f.task_id for f in (*fixed, *broken)}
    comparison = Comparison(
        a=f"{a.name}:{ma}",
        b=f"{b.name}:{mb}",
        model_a=ma,
        model_b=mb,
        tasks=len(common),
        seeds_a=seeds_a,
        seeds_b=seeds_b,
        rate_a=float(sa.mean()),
        rate_b=float(sb.mean()),
        diff=paired.mean,
        se=paired.se,
        # A difference of rates lies in [-1, 1]; the t interval can overshoot with few tasks.
        ci_low=max(-1.0, paired.ci_low),
        ci_high=min(1.0, paired.ci_high),
        p_value=paired.p_value,
        test=paired.test,
        fixed=fixed,
        broken=broken,
        changed=_outcome_changes(ea, eb, [t for t in common if t not in flipped]),
        one_sided=one_sided,
        unscored=unscored,
        both_solved=int(((sa >= 1) & (sb >= 1)).sum()),
        both_failed=int(((sa <= 0) & (sb <= 0)).sum()),
        loop_rate=_change(ea["loop_kind"].notna().mean(), eb["loop_kind"].notna().mean()),
        loop_rates={
            k: _change((ea["loop_kind"] == k).mean(), (eb["loop_kind"] == k).mean())
            for k in sorted(set(ea["loop_kind"].dropna()) | set(eb["loop_kind"].dropna()))
        },
        stall_rate=_change(ea["stalled"].mean(), eb["stalled"].mean()),
        tamper_rate=_change(ea["tampered"].mean(), eb["tampered"].mean()),
        format_errors_per_turn=_format_changes(ea, eb),
        causes=cause_moves(ea, eb),
        power=paired_power(
            paired_spread(da[da["task_id"].isin(common)], db[db["task_id"].isin(common)]),
            no_seed_gain=no_gain,
            greedy=greedy,
        ),
        notes=notes,
        scaffold_a=scaffolds.a if scaffolds else None,
        scaffold_b=scaffolds.b if scaffolds else None,
        attribution=attribute(ea, eb, scaffolds) if scaffolds else None,
    )
    if left := comparison.incomplete_note():
        comparison = comparison.model_copy(update={"notes": [f"left out of B - A: {left}", *notes]})
    return comparison


def _why_unscored(run: RunData, model: str, task: str, side: str) -> str:
    """What ``side`` has for ``task`` instead of a score: its episodes' statuses, or none."""
    frame = run.episodes
    rows = frame[(frame["model"] == model) & (frame["task_id"] == task)]
    if not len(rows):
        return f"{side}: no episode"
    statuses = sorted(set(rows["status"]))
    if statuses == ["infra_error"]:
        return f"{side}: infra_error"
    return f"{side}: {'/'.join(statuses)}, not verified"


def _seeds_note(seeds_a: int, seeds_b: int) -> str | None:
    """One sentence when the two sides ran different numbers of seeds: what pairing then means."""
    if seeds_a == seeds_b:
        return None
    more, fewer = ("A", "B") if seeds_a > seeds_b else ("B", "A")
    n_more, n_fewer = max(seeds_a, seeds_b), min(seeds_a, seeds_b)
    return (
        f"A ran {_plural(seeds_a, 'seed')} per task and B {seeds_b}: tasks are paired on their seed-averaged "
        f"scores, not seed by seed ({more}'s seeds beyond {n_fewer} have no partner), and {fewer}'s task "
        f"scores rest on {_plural(n_fewer, 'episode')} against {n_more}, so they carry more seed noise, "
        "which the interval and the power statement include"
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _seed_gain(va: SeedVariation, vb: SeedVariation) -> tuple[str | None, bool]:
    """(why more seeds would narrow nothing, greedy and unmeasured) for the power statement."""
    measured = [v for v in (va, vb) if v.tasks]
    unmeasured = [v for v in (va, vb) if not v.tasks]
    if measured and all(v.no_gain() for v in measured) and all(v.greedy for v in unmeasured):
        return measured[0].no_gain(), False
    return None, not measured and va.greedy and vb.greedy


def _outcome_changes(ea: pd.DataFrame, eb: pd.DataFrame, tasks: list[str]) -> list[OutcomeChange]:
    """Tasks (not flipped) where the share of episodes that looped or made a format error moved."""

    def shares(frame: pd.DataFrame) -> pd.DataFrame:
        fmt = frame["format_errors"].map(lambda d: bool(d and sum(d.values())))
        return (
            frame.assign(looped=frame["loop_kind"].notna(), formatted=fmt)
            .groupby("task_id")[["looped", "formatted"]]
            .mean()
        )

    sa, sb = shares(ea).to_dict("index"), shares(eb).to_dict("index")
    out = []
    for t in tasks:
        if t not in sa or t not in sb:
            continue
        la, lb = float(sa[t]["looped"]), float(sb[t]["looped"])
        fa, fb = float(sa[t]["formatted"]), float(sb[t]["formatted"])
        if la != lb or fa != fb:
            out.append(OutcomeChange(task_id=t, loop_a=la, loop_b=lb, format_a=fa, format_b=fb))
    # the biggest moves first: a loop rate from 85% to 15% shows its tasks at the top
    return sorted(out, key=lambda c: -(abs(c.loop_b - c.loop_a) + abs(c.format_b - c.format_a)))


def cause_moves(ea: pd.DataFrame, eb: pd.DataFrame) -> list[CauseMove]:
    """Each failure cause of A's and B's episodes (the same tasks), paired by task: the most moved first."""
    from harness.monitor.failure import CAUSES

    def per_task(frame: pd.DataFrame) -> dict[str, set[str]]:
        failed = frame[frame["failure_cause"].notna()]
        return {str(t): set(g) for t, g in failed.groupby("task_id")["failure_cause"]}

    ta, tb = per_task(ea), per_task(eb)
    na, nb = ea["failure_cause"].value_counts(), eb["failure_cause"].value_counts()
    moves = []
    for cause in CAUSES:
        a, b = int(na.get(cause, 0)), int(nb.get(cause, 0))
        if not a and not b:
            continue
        fixed = sum(1 for t, cs in ta.items() if cause in cs and cause not in tb.get(t, ()))
        added = sum(1 for t, cs in tb.items() if cause in cs and cause not in ta.get(t, ()))
        moves.append(CauseMove(cause=cause, a=a, b=b, fixed=fixed, added=added))
    return sorted(moves, key=lambda m: (-abs(m.b - m.a), -(m.fixed + m.added)))


def _change(a: float, b: float) -> RateChange:
    return RateChange(a=float(a), b=float(b), diff=float(b) - float(a))


def _format_changes(ea: pd.DataFrame, eb: pd.DataFrame) -> dict[str, RateChange]:
    def per_turn(frame: pd.DataFrame) -> dict[str, float]:
        turns = int(frame["turns"].sum())
        totals = expand_counts(frame, "format_errors").sum()
        return {str(k): int(v) / turns for k, v in totals.items()} if turns else {}

    ra, rb = per_turn(ea), per_turn(eb)
    cats = [c for c in FORMAT_CATEGORIES if c in ra or c in rb]
    return {c: _change(ra.get(c, 0.0), rb.get(c, 0.0)) for c in cats}
