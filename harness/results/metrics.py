"""Per-seed and per-model metrics of a run, from its episode records (pandas, no I/O).

The score of an episode is its reward (0..1; 1 = the task's tests pass). Errored episodes score 0
and are flagged; unverified ones have no score and are left out. Across seeds the resolve rate's
standard error is clustered by task (episodes of one task are correlated), and pass@k / pass^k
use the unbiased estimators over the seeds of each task.
"""

import math

import pandas as pd
from pydantic import BaseModel, ConfigDict

from harness.monitor import FormatCategory, LoopKind
from harness.results._gc import gc_paused
from harness.results.power import Precision, run_precision, run_spread
from harness.results.runs import RunData
from harness.results.seeds import SeedVariation, sampling_temperature, seed_variation
from harness.results.stats import Estimate, clustered_mean, pass_at_k, pass_hat_k
from harness.results.timeline import MOSTLY_IDLE

LOOP_KINDS = [k.value for k in LoopKind]
FORMAT_CATEGORIES = [c.value for c in FormatCategory]


def _clipped(e: Estimate) -> Estimate:
    """A rate's interval, clipped to [0, 1] (the t interval overshoots with few tasks)."""
    if math.isnan(e.se):
        return e
    return e.model_copy(update={"ci_low": max(0.0, e.ci_low), "ci_high": min(1.0, e.ci_high)})


class ModelMetrics(BaseModel):
    """Everything the report says about one model of a run."""

    model_config = ConfigDict(frozen=True)

    model: str
    episodes: int
    scored: int
    seeds: list[int]
    tasks: int
    resolve: Estimate | None  # None when nothing can be scored (say why in notes)
    precision: Precision | None = None  # the CI's half-width and what more seeds / tasks would make of it
    seed_variation: SeedVariation | None = None  # identical seeds per task, between-seed variance
    per_seed_resolve: dict[int, float]
    pass_at_k: dict[int, float]
    pass_hat_k: dict[int, float]
    loop_rate: float
    loop_rates: dict[str, float]
    format_errors_per_turn: dict[str, float]
    format_error_episodes: dict[str, float]
    repairs: dict[str, int]
    errors: int
    unverified: int
    mean_turns: float
    mean_tokens: float
    mean_wall_s: float
    llm_s: float
    server_up_s: float | None
    server_busy_s: float | None
    notes: list[str]
    server_use: str | None = None  # how well the server was used while busy (timeline.use)


def expand_counts(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """A dict column ({category: count}) as one numeric column per key, 0 where absent."""
    expanded = pd.DataFrame.from_records(frame[column].tolist(), index=frame.index)
    return expanded.fillna(0).astype("int64")


def scored(frame: pd.DataFrame) -> pd.DataFrame:
    """The verified episodes, with a float `score` column."""
    out = frame[frame["verified"] & frame["reward"].notna()].copy()
    out["score"] = out["reward"].astype(float)
    return out


@gc_paused
def per_seed(run: RunData) -> pd.DataFrame:
    """One row per (model, seed): the table behind metrics.csv and the per-seed plot."""
    frame = run.episodes
    fmt = expand_counts(frame, "format_errors").reindex(columns=FORMAT_CATEGORIES, fill_value=0)
    loops = pd.get_dummies(frame["loop_kind"]).reindex(columns=LOOP_KINDS, fill_value=False)
    work = pd.concat(
        [
            frame[["model", "seed", "turns", "tokens", "wall_s", "llm_s"]],
            pd.DataFrame(
                {
                    "score": frame["reward"].where(frame["verified"]).astype(float),
                    "error": frame["status"] == "error",
                    "unverified": ~frame["verified"],
                    "loop": frame["loop_kind"].notna(),
                },
                index=frame.index,
            ),
            loops.astype(int).add_prefix("loop_rate:"),
            (fmt > 0).astype(int).add_prefix("format_error_episodes:"),
            fmt.add_prefix("format_errors:"),
        ],
        axis=1,
    )
    g = work.groupby(["model", "seed"], sort=True)
    out = pd.DataFrame(
        {
            "episodes": g.size(),
            "scored": g["score"].count(),
            "resolved": g["score"].sum(),
            "resolve_rate": g["score"].mean(),
            "errors": g["error"].sum(),
            "unverified": g["unverified"].sum(),
            "loop_rate": g["loop"].mean(),
            "mean_turns": g["turns"].mean(),
            "mean_tokens": g["tokens"].mean(),
            "mean_wall_s": g["wall_s"].mean(),
            "llm_s": g["llm_s"].sum(),
        }
    )
    rates = g[[c for c in work.columns if c.startswith(("loop_rate:", "format_error_episodes:"))]].mean()
    turns = g["turns"].sum().replace(0, float("nan"))
    per_turn = g[[f"format_errors:{c}" for c in FORMAT_CATEGORIES]].sum().div(turns, axis=0)
    per_turn.columns = [c.replace("format_errors:", "format_errors_per_turn:") for c in per_turn.columns]
    return pd.concat([out, rates, per_turn], axis=1).reset_index()


@gc_paused
def model_metrics(run: RunData) -> list[ModelMetrics]:
    seeds_table = per_seed(run)
    return [_one_model(run, m, seeds_table[seeds_table["model"] == m]) for m in run.models]


def _one_model(run: RunData, model: str, seeds: pd.DataFrame) -> ModelMetrics:
    frame = run.episodes[run.episodes["model"] == model]
    done = scored(frame)
    notes: list[str] = []
    errors = int((frame["status"] == "error").sum())
    unverified = int((~frame["verified"]).sum())
    resolve: Estimate | None = None
    if done.empty and run.manifest.get("kind") == "proxy":
        notes.append("recorded by harness proxy: no tests ran, no resolve rate")
    elif done.empty:
        notes.append("no verified episode: no resolve rate (run harness eval again to verify)")
    elif errors == len(done):
        notes.append(f"all {errors} episodes ended in error: no resolve rate (see the error column)")
    else:
        resolve = _clipped(clustered_mean(done["score"].tolist(), done["task_id"].tolist()))
        if resolve.se == 0 and resolve.mean in (0.0, 1.0):
            resolve = _exact_interval(resolve)
            notes.append(
                f"every episode scored {resolve.mean:g}: the standard error is 0, so the CI is the exact "
                f"(Clopper-Pearson) interval over {resolve.clusters} tasks"
            )
        if errors:
            notes.append(f"{errors} errored episode(s) counted as unresolved")
        if unverified:
            notes.append(f"{unverified} unverified episode(s) left out")
        if resolve.clusters < 2:
            notes.append("one task only: no standard error")
    if "verify_mode" in frame and (shared := int((frame["verify_mode"] == "shared").sum())):
        notes.append(
            f"{shared} episode(s) verified in the agent's own sandbox (Harbor's shared mode): "
            "the agent could have tampered with what the tests ran on"
        )
    notes += _server_notes(run, model)
    n_seeds = sorted(int(s) for s in frame["seed"].unique())
    at_k, hat_k = _pass_k(done, len(n_seeds)) if resolve else ({}, {})
    variation = seed_variation(run.root, frame, sampling_temperature(run.manifest))
    precision = (
        run_precision(
            run_spread(done),
            resolve.se,
            no_seed_gain=variation.no_gain(),
            greedy=variation.greedy and not variation.tasks,
        )
        if resolve
        else None
    )
    fmt = expand_counts(frame, "format_errors")
    turns = int(frame["turns"].sum())
    repairs = expand_counts(frame, "repairs").sum()
    up = run.server[run.server["model"] == model]
    return ModelMetrics(
        model=model,
        episodes=len(frame),
        scored=len(done),
        seeds=n_seeds,
        tasks=int(frame["task_id"].nunique()),
        resolve=resolve,
        precision=precision,
        seed_variation=variation,
        per_seed_resolve={
            int(seed): float(rate)
            for seed, rate in zip(seeds["seed"], seeds["resolve_rate"], strict=True)
            if not math.isnan(rate)
        },
        pass_at_k=at_k,
        pass_hat_k=hat_k,
        loop_rate=float(frame["loop_kind"].notna().mean()),
        loop_rates={k: float(v) / len(frame) for k, v in frame["loop_kind"].value_counts().items()},
        format_errors_per_turn={
            c: float(fmt[c].sum() / turns) for c in fmt.columns if turns and fmt[c].sum()
        },
        format_error_episodes={c: float((fmt[c] > 0).mean()) for c in fmt.columns if fmt[c].sum()},
        repairs={str(k): int(v) for k, v in repairs.items() if v},
        errors=errors,
        unverified=unverified,
        mean_turns=float(frame["turns"].mean()),
        mean_tokens=float(frame["tokens"].mean()),
        mean_wall_s=float(frame["wall_s"].mean()),
        llm_s=float(frame["llm_s"].sum()),
        server_up_s=float(up["up_s"].iloc[0]) if len(up) else None,
        server_busy_s=float(up["busy_s"].iloc[0]) if len(up) else None,
        notes=notes,
        server_use=_server_use(run, model, float(up["up_s"].iloc[0]) if len(up) else None, len(frame)),
    )


def _server_use(run: RunData, model: str, up_s: float | None, episodes: int) -> str | None:
    """The server's use while busy (from its timeline) and this model's GPU-seconds per episode."""
    parts = []
    if run.timeline is not None and model in run.timeline.models() and (use := run.timeline.use()):
        parts.append(use)
    if up_s and episodes:
        parts.append(f"{up_s / episodes:.0f} GPU-seconds per episode")
    return ", ".join(parts) or None


def _server_notes(run: RunData, model: str) -> list[str]:
    """A mostly idle server or preempted requests, from the server's timeline (else server_stats)."""
    if run.timeline is not None and model in run.timeline.models():
        return run.timeline.headline_notes()
    up = run.server[run.server["model"] == model]
    if len(up) and float(up["up_s"].iloc[0]) > 0:
        up_s, busy_s = float(up["up_s"].iloc[0]), float(up["busy_s"].iloc[0])
        if busy_s / up_s < MOSTLY_IDLE:
            return [f"server mostly idle: busy {100 * busy_s / up_s:.0f}% of its {up_s:.0f} s up"]
    return []


def _exact_interval(r: Estimate) -> Estimate:
    """All tasks solved or none: the CLT interval collapses to a point, which would claim certainty.

    Treat the tasks as Bernoulli trials (each all-or-nothing here) and give the exact binomial CI.
    """
    from scipy.stats import binomtest

    ci = binomtest(round(r.mean * r.clusters), r.clusters).proportion_ci(
        confidence_level=0.95, method="exact"
    )
    return r.model_copy(update={"ci_low": float(ci.low), "ci_high": float(ci.high)})


def _pass_k(done: pd.DataFrame, seeds: int) -> tuple[dict[int, float], dict[int, float]]:
    """pass@k and pass^k for k = 1..seeds, averaged over tasks with at least k scored seeds."""
    per_task = done.assign(passed=done["score"] >= 1.0).groupby("task_id")["passed"].agg(["count", "sum"])
    # Tasks share (n, c) pairs: evaluate each pair once and weight it by how many tasks have it.
    pairs = per_task.value_counts().reset_index(name="tasks")
    at_k: dict[int, float] = {}
    hat_k: dict[int, float] = {}
    for k in range(1, seeds + 1):
        usable = pairs[pairs["count"] >= k]
        if usable.empty:
            continue
        weights = usable["tasks"].sum()
        rows = list(zip(usable["count"], usable["sum"], usable["tasks"], strict=True))
        at_k[k] = float(sum(w * pass_at_k(int(n), int(c), k) for n, c, w in rows) / weights)
        hat_k[k] = float(sum(w * pass_hat_k(int(n), int(c), k) for n, c, w in rows) / weights)
    return at_k, hat_k


def headline(m: ModelMetrics) -> str:
    """One line per model, as `harness eval` prints at its end."""
    if m.resolve is None:
        rate = "no resolve rate"
    elif math.isnan(m.resolve.se):
        rate = f"resolved {100 * m.resolve.mean:.1f}%"
    else:
        seeds = f"{len(m.seeds)} seed{'s' if len(m.seeds) != 1 else ''}"
        rate = (
            f"resolved {100 * m.resolve.mean:.1f}% (SE {100 * m.resolve.se:.1f}, 95% CI "
            f"{100 * m.resolve.ci_low:.1f}-{100 * m.resolve.ci_high:.1f}; {m.resolve.clusters} tasks x {seeds})"
        )
    v = m.seed_variation
    if v is not None and v.tasks:
        rate += f"; {v.sentence()}"
    if m.precision is not None:
        rate += f"; {m.precision.sentence()}"
    elif v is not None and (why := v.no_gain()):  # no CI to project (e.g. every episode scored 0)
        rate += (
            f"; {why}, so more seeds buy nothing: more tasks would narrow the CI, or a temperature above 0"
        )
    loops = f"loops {100 * m.loop_rate:.0f}%"
    fmt_total = sum(m.format_errors_per_turn.values())
    server = f"; server: {m.server_use}" if m.server_use else ""
    return f"{m.model}: {rate}; {loops}; {fmt_total:.2f} format errors/turn{server}" + (
        f" [{'; '.join(m.notes)}]" if m.notes else ""
    )
