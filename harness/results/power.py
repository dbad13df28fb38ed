"""How small a difference a run can see, and what more seeds or more tasks would buy.

The per-task score (or paired difference) varies across tasks for two reasons: tasks differ in
difficulty (or in how much the fine-tune helps them), and one episode of a task is a noisy draw
(sampling, the agent's path). More seeds average the second part away, more tasks shrink both.
With two or more seeds per task the two parts are told apart from the within-task variance across
seeds; with one seed they cannot be, so a projection to more seeds is a range: from "all of the
spread was seed noise" (seeds help as 1/sqrt(S)) to "none of it was" (seeds do not help).

Seeds that cannot vary are said so rather than projected (seeds.py measures it): when every task's
seeds gave identical episodes, or at temperature 0 scored the same, more seeds buy nothing; with one
seed at temperature 0 the seed option says they would differ only through the server. Either way
the statement names what would help: more tasks, or a temperature above 0.

Detectable means: the 95% t interval of the paired difference (the one `harness compare` shows and
the gate reads) excludes zero. The minimum detectable effect (MDE) at 80% power is the true mean
difference for which that happens in 80% of runs, from the noncentral t distribution, with the
observed per-task standard deviation taken as the true one.
"""

import math
from typing import Final

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict
from scipy import optimize, stats

__all__ = [
    "POWER",
    "Power",
    "PowerOption",
    "Precision",
    "Spread",
    "detectable_difference",
    "paired_power",
    "paired_spread",
    "run_precision",
    "run_spread",
]

POWER: Final = 0.80
_CONFIDENCE: Final = 0.95


def _power_of(nc: float, df: int, critical: float) -> float:
    """P(|T| > critical) for T ~ noncentral t(df, nc): the chance the interval excludes 0.

    scipy's nct.cdf returns nan for some far-tail arguments (df 1-2, nc ~ 15); that wrong-sign
    tail is below 1e-8 there, so nan counts as 0.
    """
    wrong_sign = float(stats.nct.cdf(-critical, df, nc))
    return float(stats.nct.sf(critical, df, nc)) + (0.0 if math.isnan(wrong_sign) else wrong_sign)


def detectable_difference(sd: float, n: int, confidence: float = _CONFIDENCE, power: float = POWER) -> float:
    """Smallest true mean difference that a paired t interval over n tasks detects with this power.

    sd is the standard deviation of one task's difference. The test statistic is noncentral t with
    n - 1 degrees of freedom and noncentrality delta * sqrt(n) / sd; the noncentrality reaching the
    power is found by root finding, so this is exact for normal differences (the normal
    approximation (z_a + z_b) * sd / sqrt(n) is 5% optimistic at 20 tasks, 11% at 10, 50% at 3).
    nan when it cannot be estimated (fewer than 2 tasks, or no spread at all).
    """
    if n < 2 or not math.isfinite(sd) or sd <= 0:
        return float("nan")
    df = n - 1
    critical = float(stats.t.ppf(0.5 + confidence / 2, df))
    high = critical + float(stats.norm.ppf(power)) + 1.0
    while _power_of(high, df, critical) < power:  # with 1-3 df the t tails are heavy
        high *= 2
    nc = optimize.brentq(lambda x: _power_of(x, df, critical) - power, 0.0, high, xtol=1e-10)
    return float(nc * sd / math.sqrt(n))


class Spread(BaseModel):
    """Variance across tasks of one task's value (a seed-averaged score or paired difference).

    total: observed, at today's seeds (ddof=1). noise: the variance one episode adds through seed
    noise (summed over the models compared); None when every task has one seed, which cannot tell
    it apart. noise_now: the part of total that is seed noise at today's seed counts.
    """

    model_config = ConfigDict(frozen=True)

    tasks: int
    seeds: int
    total: float
    noise: float | None
    noise_now: float | None

    def variance_at(self, seeds: int) -> tuple[float, float]:
        """(low, high) variance of one task's value with this many seeds per task for every model."""
        if self.noise is None or self.noise_now is None:
            # total = between + noise / seeds_now, with the split unknown: both extremes.
            v = self.total * self.seeds / seeds
            return (min(v, self.total), max(v, self.total))
        # Sample variances can put more seed noise into total than total holds: cap its share at all.
        share = min(1.0, self.total / self.noise_now) if self.noise_now > 0 else 1.0
        between = max(0.0, self.total - self.noise_now)
        v = between + share * self.noise / seeds
        return (v, v)


def _per_task(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.groupby("task_id")["score"].agg(["mean", "var", "count"])


def _noise(per_task: pd.DataFrame) -> tuple[float | None, float | None]:
    """(per-episode noise variance, its share of one task mean's variance) from tasks with >= 2 seeds."""
    multi = per_task[per_task["count"] >= 2]
    if multi.empty:
        return None, None
    w = float(multi["var"].mean())
    return w, w * float((1.0 / per_task["count"]).mean())


def run_spread(frame: pd.DataFrame) -> Spread:
    """Spread of one model's seed-averaged task scores (frame: task_id, score)."""
    per_task = _per_task(frame)
    noise, noise_now = _noise(per_task)
    means = per_task["mean"].to_numpy()
    return Spread(
        tasks=len(per_task),
        seeds=int(per_task["count"].max()) if len(per_task) else 0,
        total=float(np.var(means, ddof=1)) if len(means) >= 2 else float("nan"),
        noise=noise,
        noise_now=noise_now,
    )


def paired_spread(a: pd.DataFrame, b: pd.DataFrame) -> Spread:
    """Spread of the per-task difference mean(B) - mean(A) over the tasks both frames score."""
    pa, pb = _per_task(a), _per_task(b)
    common = pa.index.intersection(pb.index)
    pa, pb = pa.loc[common], pb.loc[common]
    d = (pb["mean"] - pa["mean"]).to_numpy()
    (na, na_now), (nb, nb_now) = _noise(pa), _noise(pb)
    known = na is not None and nb is not None
    return Spread(
        tasks=len(common),
        seeds=int(max(pa["count"].max(), pb["count"].max())) if len(common) else 0,
        total=float(np.var(d, ddof=1)) if len(d) >= 2 else float("nan"),
        noise=(na or 0.0) + (nb or 0.0) if known else None,
        noise_now=(na_now or 0.0) + (nb_now or 0.0) if known else None,
    )


class PowerOption(BaseModel):
    """What the MDE (or the CI half-width) would be with this many tasks and seeds; low = high when known."""

    model_config = ConfigDict(frozen=True)

    tasks: int
    seeds: int
    low: float
    high: float

    def points(self) -> str:
        lo, hi = _pts(self.low), _pts(self.high)
        return lo if lo == hi else f"{lo} to {hi}"


def _pts(fraction: float) -> str:
    """Points of resolve rate: whole numbers, one decimal below 10 (large suites resolve finer)."""
    x = 100 * fraction
    if x > 100:
        return "over 100"  # past the whole range of a rate: say so rather than print 188
    return f"{x:.0f}" if x >= 9.95 else f"{x:.1f}"


def _pm(points: str) -> str:
    """A half-width as text: "+-12", or "wider than +-100" past the range."""
    return "wider than +-100" if points == "over 100" else f"+-{points}"


def _about(points: str) -> str:
    text = _pm(points)
    return text if text.startswith("wider") else f"about {text}"


# What the power sentences say when seeds cannot narrow anything (seeds.py measures it).
_GREEDY_SEEDS = (
    "more seeds at temperature 0 differ only through the server's nondeterminism and likely buy nothing"
)
_VARYING_SEEDS = "for seeds that vary, sample at a temperature above 0"


def _seed_options(seeds: int) -> list[int]:
    return [3] if seeds < 3 else [2 * seeds]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class Power(BaseModel):
    """The minimum detectable effect at 80% power of a paired comparison, and two ways to shrink it."""

    model_config = ConfigDict(frozen=True)

    tasks: int
    seeds: int
    mde: float | None
    options: list[PowerOption]
    seeds_known: bool  # False: one seed, so the seed option is a range
    # Why more seeds would narrow nothing, as measured (seeds.py: identical episodes, or at
    # temperature 0 the same scores); greedy: temperature 0 with one seed, so unmeasured.
    no_seed_gain: str | None = None
    greedy: bool = False

    def sentence(self, full: bool = True) -> str:
        """E.g. "with 20 tasks x 1 seed, differences under 26 points are not detectable ...; 3 seeds: 15 to 26 points"."""
        head = f"with {_plural(self.tasks, 'task')} x {_plural(self.seeds, 'seed')}"
        if self.mde is None:
            if self.tasks < 2:
                return f"{head}: too few tasks for a detectable-effect estimate"
            # No spread to scale a t test by: say what an exact bound still allows (see gate.py).
            unseen = 1.0 - 0.025 ** (1.0 / self.tasks)
            return (
                f"{head}: every task's difference is the same, so there is no spread to estimate power "
                f"from; a change on up to {_pts(unseen)}% of the tasks is not ruled out"
            )
        if self.mde > 1:
            first = f"{head}, no difference is reliably detectable (80% power needs over 100 points)"
        else:
            first = (
                f"{head}, differences under {_pts(self.mde)} points are not detectable (80% power, 95% CI)"
            )
        parts = [first]
        if self.no_seed_gain:
            parts.append(f"{self.no_seed_gain}, so more seeds buy nothing")
        for o in self.options:
            if o.tasks == self.tasks:
                if self.no_seed_gain:
                    continue
                if self.greedy:
                    parts.append(_GREEDY_SEEDS)
                    continue
                what = _plural(o.seeds, "seed")
            else:
                what = f"{o.tasks} tasks x {_plural(self.seeds, 'seed')}"
            parts.append(f"{what}: {o.points()} points")
        if self.no_seed_gain or self.greedy:
            parts.append(_VARYING_SEEDS)
        text = "; ".join(parts)
        if not self.seeds_known and full and not self.greedy:
            text += " (one seed cannot tell seed noise from task difficulty: the low end if it is all noise)"
        return text


def paired_power(spread: Spread, *, no_seed_gain: str | None = None, greedy: bool = False) -> Power:
    """The MDE of a paired comparison; the flags as in run_precision (both sides' seeds)."""
    sd = math.sqrt(spread.total) if math.isfinite(spread.total) else float("nan")
    mde = detectable_difference(sd, spread.tasks)
    options: list[PowerOption] = []
    if math.isfinite(mde):
        for s in _seed_options(spread.seeds):
            low, high = spread.variance_at(s)
            options.append(
                PowerOption(
                    tasks=spread.tasks,
                    seeds=s,
                    low=detectable_difference(math.sqrt(low), spread.tasks),
                    high=detectable_difference(math.sqrt(high), spread.tasks),
                )
            )
        more = 2 * spread.tasks
        options.append(
            PowerOption(
                tasks=more,
                seeds=spread.seeds,
                low=detectable_difference(sd, more),
                high=detectable_difference(sd, more),
            )
        )
    return Power(
        tasks=spread.tasks,
        seeds=spread.seeds,
        mde=mde if math.isfinite(mde) else None,
        options=options,
        seeds_known=spread.noise is not None,
        no_seed_gain=no_seed_gain,
        greedy=greedy,
    )


class Precision(BaseModel):
    """A single run's 95% CI half-width and what more seeds or tasks would make of it."""

    model_config = ConfigDict(frozen=True)

    tasks: int
    seeds: int
    half_width: float
    options: list[PowerOption]
    seeds_known: bool
    no_seed_gain: str | None = None  # see Power
    greedy: bool = False

    def sentence(self) -> str:
        parts = [f"{_plural(self.seeds, 'seed')}: {_pm(_pts(self.half_width))} points"]
        if self.no_seed_gain:
            parts.append(f"{self.no_seed_gain}, so more seeds buy nothing")
        for o in self.options:
            if o.tasks == self.tasks:
                if self.no_seed_gain:
                    continue
                if self.greedy:
                    parts.append(_GREEDY_SEEDS)
                    continue
                parts.append(f"with {_plural(o.seeds, 'seed')} {_about(o.points())}")
            else:
                parts.append(f"with {o.tasks} tasks {_about(o.points())}")
        if self.no_seed_gain or self.greedy:
            parts.append(_VARYING_SEEDS)
        text = "; ".join(parts)
        if not self.seeds_known and not self.greedy:
            text += " (the low end if the spread is seed noise)"
        return text


def _half(se: float, n: int) -> float:
    return float(stats.t.ppf(0.5 + _CONFIDENCE / 2, n - 1)) * se


def run_precision(
    spread: Spread, se: float, *, no_seed_gain: str | None = None, greedy: bool = False
) -> Precision | None:
    """Projections of a run's CI (se: its clustered standard error, at today's tasks and seeds).

    no_seed_gain: why more seeds would narrow nothing (SeedVariation.no_gain); greedy: temperature 0
    and one seed. Either way more seeds are not offered as a way to narrow the CI."""
    n = spread.tasks
    if n < 2 or not math.isfinite(se) or se <= 0 or not spread.total > 0:
        return None
    options = []
    for s in _seed_options(spread.seeds):
        low, high = spread.variance_at(s)
        options.append(
            PowerOption(
                tasks=n,
                seeds=s,
                low=_half(se * math.sqrt(low / spread.total), n),
                high=_half(se * math.sqrt(high / spread.total), n),
            )
        )
    more = _half(se * math.sqrt(n / (2 * n)), 2 * n)
    options.append(PowerOption(tasks=2 * n, seeds=spread.seeds, low=more, high=more))
    return Precision(
        tasks=n,
        seeds=spread.seeds,
        half_width=_half(se, n),
        options=options,
        seeds_known=spread.noise is not None,
        no_seed_gain=no_seed_gain,
        greedy=greedy,
    )
