"""PNG plots of a run (matplotlib, headless): resolve rate with CI, loop kinds, format errors, turns."""

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on a GPU box or in CI

import matplotlib.pyplot as plt
import pandas as pd

from harness.results.metrics import ModelMetrics

_COLORS = ["#3b6fb6", "#d9822b", "#3a9d5d", "#b6443b", "#7d5ba6", "#8c6d31"]


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def resolve_plot(metrics: list[ModelMetrics], path: Path) -> Path:
    """Each model's mean resolve rate with its clustered 95% CI, and each seed's rate beside it."""
    fig, ax = plt.subplots(figsize=(max(4.0, 1.8 * len(metrics) + 1.5), 3.6))
    for i, m in enumerate(metrics):
        color = _COLORS[i % len(_COLORS)]
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


def _grouped_bars(
    metrics: list[ModelMetrics], values: list[dict[str, float]], title: str, ylabel: str, path: Path
) -> Path:
    keys = sorted({k for v in values for k in v})
    fig, ax = plt.subplots(figsize=(max(4.5, 0.9 * max(1, len(keys)) * len(metrics) + 2), 3.4))
    if not keys:
        ax.text(0.5, 0.5, "none", ha="center", va="center", fontsize=14, transform=ax.transAxes)
        ax.set_xticks([])
    width = 0.8 / max(1, len(metrics))
    for i, (m, v) in enumerate(zip(metrics, values, strict=True)):
        xs = [k + i * width for k in range(len(keys))]
        ax.bar(xs, [v.get(k, 0.0) for k in keys], width=width, color=_COLORS[i % len(_COLORS)], label=m.model)
    if keys:
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(keys))], keys, rotation=15, fontsize=8)
        ax.legend(fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def loops_plot(metrics: list[ModelMetrics], path: Path) -> Path:
    return _grouped_bars(
        metrics,
        [{k: 100 * v for k, v in m.loop_rates.items()} for m in metrics],
        "Loop kinds",
        "episodes (%)",
        path,
    )


def format_errors_plot(metrics: list[ModelMetrics], path: Path) -> Path:
    return _grouped_bars(
        metrics,
        [m.format_errors_per_turn for m in metrics],
        "Format errors by category",
        "errors per turn",
        path,
    )


def turns_plot(episodes: pd.DataFrame, models: list[str], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    top = int(episodes["turns"].max()) if len(episodes) else 1
    bins = range(0, top + 2)
    for i, m in enumerate(models):
        ax.hist(
            episodes.loc[episodes["model"] == m, "turns"],
            bins=bins,
            alpha=0.55,
            color=_COLORS[i % len(_COLORS)],
            label=m,
        )
    ax.set_xlabel("turns per episode")
    ax.set_ylabel("episodes")
    ax.set_title("Turns per episode", fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)
