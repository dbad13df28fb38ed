"""PNG plots of a run (matplotlib, headless): resolve rate with CI, loop kinds, format errors, turns,
and the server's timeline.

Made to be read at a glance at a laptop's width: one colour per model in every plot (the model's
place in the run, so base and fine-tuned keep their colours across plots), whole numbers on
axes that count things, and a sentence instead of an empty chart.
"""

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on a GPU box or in CI

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from harness.results.metrics import ModelMetrics
from harness.results.timeline import Timeline

_COLORS = ["#3b6fb6", "#d9822b", "#3a9d5d", "#b6443b", "#7d5ba6", "#8c6d31"]
_WIDTH = 6.0  # inches at dpi 110: 660 px, two plots side by side on a laptop screen


def color_of(i: int) -> str:
    """The colour of the i-th model of a run (or of A = 0 and B = 1 in a comparison)."""
    return _COLORS[i % len(_COLORS)]


def _empty(ax: plt.Axes, sentence: str) -> None:
    """No data: say so in words instead of drawing axes around nothing."""
    ax.set_axis_off()
    ax.text(0.5, 0.5, sentence, ha="center", va="center", fontsize=13, color="#445", transform=ax.transAxes)


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def resolve_plot(metrics: list[ModelMetrics], path: Path) -> Path:
    """Each model's mean resolve rate with its clustered 95% CI, and each seed's rate beside it."""
    fig, ax = plt.subplots(figsize=(min(_WIDTH, max(4.0, 1.8 * len(metrics) + 1.5)), 3.6))
    for i, m in enumerate(metrics):
        color = color_of(i)
        if m.resolve is not None:
            ax.bar(i, 100 * m.resolve.mean, width=0.55, color=color, alpha=0.35, label=m.model)
            if not math.isnan(m.resolve.se):
                low, high = (
                    100 * m.resolve.mean - 100 * m.resolve.ci_low,
                    100 * m.resolve.ci_high - 100 * m.resolve.mean,
                )
                ax.errorbar(i, 100 * m.resolve.mean, yerr=[[low], [high]], color="black", capsize=6, lw=1.5)
        seeds = sorted(m.per_seed_resolve.items())
        for j, (seed, rate) in enumerate(seeds):
            x = i - 0.18 + (0.36 * j / max(1, len(seeds) - 1) if len(seeds) > 1 else 0.18)
            ax.plot(x, 100 * rate, "o", color=color, markeredgecolor="black", ms=6)
            ax.annotate(f"s{seed}", (x, 100 * rate), textcoords="offset points", xytext=(4, 3), fontsize=7)
    ax.set_xticks(range(len(metrics)), [m.model for m in metrics], rotation=10)
    ax.set_ylabel("resolved (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Resolve rate, 95% CI clustered by task\n(dots: one per seed)", fontsize=9)
    return _save(fig, path)


def grouped_bars_figure(
    models: list[str], values: list[dict[str, float]], title: str, ylabel: str, empty: str
) -> Figure:
    """Bars per key, one colour per model; the sentence `empty` when every value is zero."""
    keys = sorted({k for v in values for k in v if v[k]})
    fig, ax = plt.subplots(figsize=(_WIDTH, 3.4))
    ax.set_title(title, fontsize=10)
    if not keys:
        _empty(ax, empty)
        return fig
    width = 0.8 / max(1, len(models))
    for i, (m, v) in enumerate(zip(models, values, strict=True)):
        xs = [k + i * width for k in range(len(keys))]
        ax.bar(xs, [v.get(k, 0.0) for k in keys], width=width, color=color_of(i), label=m)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(keys))], keys, rotation=15, fontsize=8)
    ax.set_xlim(-0.3, max(len(keys), 3) - 0.1)  # a lone category keeps a bar's width, not the plot's
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.set_ylabel(ylabel)
    return fig


def loops_plot(metrics: list[ModelMetrics], path: Path) -> Path:
    return _save(
        grouped_bars_figure(
            [m.model for m in metrics],
            [{k: 100 * v for k, v in m.loop_rates.items()} for m in metrics],
            "Loop kinds",
            "episodes (%)",
            "no loops",
        ),
        path,
    )


def format_errors_plot(metrics: list[ModelMetrics], path: Path) -> Path:
    return _save(
        grouped_bars_figure(
            [m.model for m in metrics],
            [m.format_errors_per_turn for m in metrics],
            "Format errors by category",
            "errors per turn",
            "no format errors",
        ),
        path,
    )


def turns_plot(episodes: pd.DataFrame, models: list[str], path: Path) -> Path:
    return _save(turns_figure(episodes, models), path)


def turns_figure(episodes: pd.DataFrame, models: list[str]) -> Figure:
    """Episodes per turn count: one bar per whole number of turns, models side by side."""
    fig, ax = plt.subplots(figsize=(_WIDTH, 3.4))
    ax.set_title("Turns per episode", fontsize=10)
    if episodes.empty:
        _empty(ax, "no episodes")
        return fig
    turns = episodes["turns"].astype(int)
    values = list(range(int(turns.min()), int(turns.max()) + 1))
    width = 0.8 / max(1, len(models))
    for i, m in enumerate(models):
        counts = turns[episodes["model"] == m].value_counts()
        xs = [v - 0.4 + width * (i + 0.5) for v in values]
        ax.bar(xs, [int(counts.get(v, 0)) for v in values], width=width, color=color_of(i), label=m)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("turns in the episode")
    ax.set_ylabel("episodes")
    ax.legend(fontsize=8)
    return fig


def timeline_plot(timeline: Timeline, path: Path) -> Path:
    """The server over the run: requests (and, with --concurrency auto, the admission limit and the
    episodes in flight), KV cache, tokens/s and prefix-cache hits, with its phases.

    Shaded: start-up (grey) and the rollout phase (green, from ready until the rollouts ended);
    dashed lines: idle shutdowns (red), restarts and crashes (orange).
    """
    s = timeline.samples
    fig, axes = plt.subplots(4, 1, figsize=(_WIDTH + 2, 6.6), sharex=True)
    minutes = s["t"] / 60
    req, kv, tok, hit = axes
    req.step(minutes, s["running"], where="post", color=color_of(0), label="running")
    req.step(minutes, s["waiting"], where="post", color=color_of(3), label="waiting")
    top = float(s[["running", "waiting"]].max().max()) if len(s) else 0.0
    admission = timeline.admission
    if admission is not None and len(admission):  # --concurrency auto: what it admitted, and its limit
        at = admission["t"] / 60
        req.step(at, admission["limit"], where="post", color="#333", ls="--", lw=1, label="admission limit")
        req.step(at, admission["admitted"], where="post", color=color_of(1), lw=1, label="episodes in flight")
        if "resource" in admission:  # what made it shed: the KV cache, the queue, the host's CPUs, ...
            shed = admission[(admission["action"] == "shed") & admission["resource"].notna()]
            for i, (resource, rows) in enumerate(shed.groupby("resource")):
                req.scatter(
                    rows["t"] / 60,
                    rows["limit"],
                    marker="v",
                    s=28,
                    color=color_of(2 + i),
                    zorder=3,
                    label=f"shed: {resource}",
                )
        top = max(top, float(admission["limit"].max()))
    req.set_ylabel("requests\n/ episodes" if admission is not None else "requests")
    req.yaxis.set_major_locator(MaxNLocator(integer=True))
    req.set_ylim(bottom=0, top=max(1.0, top * 1.15))
    req.legend(fontsize=7, loc="center right")
    kv.plot(minutes, 100 * s["kv_cache_usage"], color=color_of(4))
    kv.set_ylabel("KV cache %")
    kv.set_ylim(0, max(5.0, 100 * float(s["kv_cache_usage"].max()) * 1.15) if len(s) else 5.0)
    tok.plot(minutes, s["tokens_per_s"], color=color_of(2))
    tok.set_ylabel("tokens/s")
    tok.set_ylim(bottom=0)
    hit.plot(minutes, 100 * s["hit_rate"], ".", color=color_of(1), ms=3)
    hit.set_ylabel("prefix hit %")
    hit.set_ylim(0, 105)
    hit.set_xlabel("minutes since the server was launched")
    for seg in timeline.segments:
        ready = seg.ready if seg.ready is not None else seg.start
        end = seg.stop if seg.stop is not None else seg.start + seg.up_s
        for ax in axes:
            ax.axvspan(seg.start / 60, ready / 60, color="#999", alpha=0.18, lw=0)
            ax.axvspan(ready / 60, end / 60, color="#3a9d5d", alpha=0.08, lw=0)
            if seg.stop_reason.startswith("idle"):
                ax.axvline(end / 60, color="#b6443b", ls="--", lw=1.2)
            elif seg.stop_reason == "restart" or seg.stop_reason.startswith("crash"):
                ax.axvline(end / 60, color="#d9822b", ls="--", lw=1.2)
        if seg.stop is None:
            continue  # still up, or the run was killed: nothing to mark
        req.annotate(
            f"stop: {seg.stop_reason}",
            (end / 60, 0.97),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            ha="right",
            va="top",
        )
    frac = timeline.busy_fraction
    busy = f"busy {100 * frac:.0f}% of {timeline.up_s:.0f} s up" if frac is not None else "no samples"
    req.set_title(
        f"Server timeline ({busy}; grey: start-up, green: ready until stopped, the rollout phase)",
        fontsize=10,
    )
    return _save(fig, path)
