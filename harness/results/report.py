"""`harness report RUN`: report.md, a self-contained report.html, metrics.csv and PNG plots.

The HTML embeds its plots (base64) and the episodes' trajectories, so it can be mailed or
opened offline; its episode list filters by model, status, loop kind and task.
"""

import base64
import html
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.errors import HarnessError
from harness.progress import console
from harness.results.arms import scaffold_sentences
from harness.results.episode_view import EpisodeView, TurnChecks, episode_id, load_episode
from harness.results.failures import (
    CLUSTERS_SHOWN,
    EXAMPLES,
    Cluster,
    cause_table,
    causes_markdown,
    clusters_markdown,
    failure_clusters,
    failure_of,
)
from harness.results.manifest import manifest_lines, manifest_markdown
from harness.results.metrics import ModelMetrics, model_metrics, per_seed
from harness.results.runs import RunData, load_run
from harness.results.store import EpisodeRecord
from harness.tasks.selection import TaskSelection

EMBED_LIMIT = 300  # trajectories embedded in report.html; beyond that, the problematic ones first
_TEXT_LIMIT = 4000


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    html: Path
    csv: Path
    plots: dict[str, Path]
    metrics: list[ModelMetrics]
    warnings: list[str]
    selected: str | None = None  # --task / --limit: "3 of 20 tasks (...)"


def run_checks(run: RunData) -> Callable[[EpisodeRecord], TurnChecks | None]:
    """Each record's turn checks: its scaffold's (the record's own; an older record's, run.json's),
    as its format errors were counted. None where the scaffold is gone."""
    from harness.episodes.scaffold import load_scaffold

    listed = str(run.manifest.get("scaffold") or "openhands-codeact")
    found: dict[str, TurnChecks | None] = {}

    def checks(record: EpisodeRecord) -> TurnChecks | None:
        name = record.scaffold or listed
        if name not in found:
            try:
                scaffold = load_scaffold(name)
                found[name] = TurnChecks(scaffold.tool_schemas(), scaffold.parallel_tool_calls)
            except (HarnessError, OSError, ValueError):
                found[name] = None
        return found[name]

    return checks


def write_report(
    path: Path,
    out_dir: Path | None = None,
    gpu_price: float | None = None,
    selection: TaskSelection | None = None,
) -> ReportFiles:
    """Write the report of the run at ``path``; ``gpu_price`` (per GPU-hour) adds the server's cost;
    ``selection`` (--task / --limit) reports those tasks only."""
    if gpu_price is not None and not (gpu_price >= 0 and math.isfinite(gpu_price)):
        raise HarnessError(
            f"--gpu-price {gpu_price:g}: must be a price per GPU-hour, 0 or more (e.g. --gpu-price 2.5)"
        )
    run = load_run(path, selection)
    out = out_dir or run.root
    out.mkdir(parents=True, exist_ok=True)
    with console.status(f"aggregating {len(run.episodes)} episodes"):
        metrics = model_metrics(run)
        seeds = per_seed(run)
    with console.status("drawing plots"):
        from harness.results import plots

        files = {
            "resolve": plots.resolve_plot(metrics, out / "plot_resolve.png"),
            "loops": plots.loops_plot(metrics, out / "plot_loops.png"),
            "format_errors": plots.format_errors_plot(metrics, out / "plot_format_errors.png"),
            "turns": plots.turns_plot(run.episodes, run.models, out / "plot_turns.png"),
        }
        if run.timeline is not None and len(run.timeline.samples):
            files["timeline"] = plots.timeline_plot(run.timeline, out / "plot_timeline.png")
    csv = out / "metrics.csv"
    metrics_table(metrics, seeds).to_csv(csv, index=False)
    md = out / "report.md"
    server = _server_lines(run, gpu_price)
    scaffolds = scaffold_sentences(run)
    clusters = failure_clusters(run.records())
    md.write_text(_markdown(run, metrics, seeds, files, server, scaffolds, clusters))
    with console.status("writing report.html"):
        views = _episode_views(run, clusters)
        page = out / "report.html"
        page.write_text(_html(run, metrics, seeds, files, views, server, scaffolds, clusters))
    return ReportFiles(
        markdown=md,
        html=page,
        csv=csv,
        plots=files,
        metrics=metrics,
        warnings=run.warnings,
        selected=run.selected,
    )


def metrics_table(metrics: list[ModelMetrics], seeds: pd.DataFrame) -> pd.DataFrame:
    """metrics.csv: a row per (model, seed), then a row per model (seed = "all") with the CI columns."""
    rows = seeds.copy()
    rows["seed"] = rows["seed"].astype(str)
    summary = []
    for m in metrics:
        r = m.resolve
        row: dict[str, object] = {
            "model": m.model,
            "seed": "all",
            "episodes": m.episodes,
            "scored": m.scored,
            "resolve_rate": r.mean if r else float("nan"),
            "resolve_se": r.se if r else float("nan"),
            "resolve_ci_low": r.ci_low if r else float("nan"),
            "resolve_ci_high": r.ci_high if r else float("nan"),
            "errors": m.errors,
            "unverified": m.unverified,
            "loop_rate": m.loop_rate,
            "mean_turns": m.mean_turns,
            "mean_tokens": m.mean_tokens,
            "mean_wall_s": m.mean_wall_s,
            "llm_s": m.llm_s,
            "server_up_s": m.server_up_s,
            "server_busy_s": m.server_busy_s,
        }
        if (v := m.seed_variation) is not None and v.tasks:
            row["seed_tasks"] = len(v.tasks)
            row["seed_identical_tasks"] = v.identical_tasks
            row["seed_score_variance"] = v.score_variance
        row.update({f"pass@{k}": v for k, v in m.pass_at_k.items()})
        row.update({f"pass^{k}": v for k, v in m.pass_hat_k.items()})
        summary.append(row)
    return pd.concat([rows, pd.DataFrame(summary)], ignore_index=True)


def _pct(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:.1f}%"


def _rate(m: ModelMetrics) -> str:
    r = m.resolve
    if r is None:
        return "no rate"
    if math.isnan(r.se):
        return _pct(r.mean)
    return f"{_pct(r.mean)} (SE {100 * r.se:.1f}, CI {100 * r.ci_low:.1f}-{100 * r.ci_high:.1f})"


def _summary_rows(m: ModelMetrics) -> list[str]:
    passk = ", ".join(f"pass@{k} {_pct(v)}" for k, v in m.pass_at_k.items() if k > 1)
    passk += ("; " if passk else "") + ", ".join(
        f"pass^{k} {_pct(v)}" for k, v in m.pass_hat_k.items() if k > 1
    )
    loops = ", ".join(f"{k} {_pct(v)}" for k, v in sorted(m.loop_rates.items())) or "none"
    fmt = (
        ", ".join(f"{k} {v:.3f}" for k, v in sorted(m.format_errors_per_turn.items(), key=lambda kv: -kv[1]))
        or "none"
    )
    server = (
        f"{m.server_up_s:.0f} s / {m.server_busy_s:.0f} s"
        if m.server_up_s is not None and m.server_busy_s is not None
        else "-"
    )
    return [
        m.model,
        f"{m.episodes} ({m.scored} scored)",
        f"{len(m.seeds)} x {m.tasks}",
        _rate(m),
        passk or "-",
        f"{_pct(m.loop_rate)} ({loops})",
        fmt,
        f"{m.mean_turns:.1f}",
        f"{m.mean_tokens:.0f}",
        f"{m.mean_wall_s:.1f}",
        server,
        "; ".join(m.notes) or "",
    ]


_SUMMARY_HEAD = [
    "model",
    "episodes",
    "seeds x tasks",
    "resolved (95% CI, clustered by task)",
    "pass@k / pass^k",
    "loops",
    "format errors / turn",
    "mean turns",
    "mean tokens",
    "mean wall s",
    "server up / busy",
    "notes",
]


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    return "\n".join(
        [
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
            *("| " + " | ".join(r) + " |" for r in esc),
        ]
    )


def _seed_rows(seeds: pd.DataFrame) -> list[list[str]]:
    return [
        [
            str(r["model"]),
            str(r["seed"]),
            str(int(r["episodes"])),
            f"{r['resolved']:.0f}/{int(r['scored'])}",
            _pct(r["resolve_rate"]),
            _pct(r["loop_rate"]),
            str(int(r["errors"])),
            f"{r['mean_turns']:.1f}",
        ]
        for _, r in seeds.iterrows()
    ]


_SEED_HEAD = ["model", "seed", "episodes", "resolved", "rate", "loops", "errors", "mean turns"]
_SEEDS_SHOWN = 200  # per-task rows of the seeds table; the counts above it cover every task


def _seed_lines(metrics: list[ModelMetrics]) -> list[str]:
    """What the seeds varied, per model: identical trajectories and the between-seed variance."""
    out = []
    for m in metrics:
        v = m.seed_variation
        if v is None:
            continue
        line = f"{m.model}: {v.sentence()}"
        if why := v.no_gain():
            line += f"; {why}, so more seeds buy nothing: more tasks would narrow the CI, or a temperature above 0"
        elif v.greedy and v.tasks:
            line += " (temperature 0: seeds differ only through the server's nondeterminism)"
        out.append(line)
    return out


_TASK_SEEDS_HEAD = ["model", "task", "seeds", "identical", "distinct trajectories", "scores"]


def _task_seed_rows(metrics: list[ModelMetrics]) -> list[list[str]]:
    rows = []
    for m in metrics:
        for t in (m.seed_variation.tasks if m.seed_variation else [])[:_SEEDS_SHOWN]:
            rows.append(
                [
                    m.model,
                    t.task_id,
                    str(t.seeds),
                    f"{t.identical} of {t.seeds}" if t.distinct is not None else "unknown",
                    "-" if t.distinct is None else str(t.distinct),
                    " ".join("-" if x is None else f"{x:g}" for x in t.scores),
                ]
            )
    return rows


def _server_lines(run: RunData, gpu_price: float | None) -> list[str]:
    """The server's summary (up, busy, GPU-hours, cost, preemptions) and what its headline says."""
    t = run.timeline
    if t is None:
        if run.server_total is None:
            return []
        up, busy = run.server_total
        cost = f" = {gpu_price * up / 3600:.2f} at {gpu_price:g}/hour" if gpu_price is not None else ""
        return [
            f"server up {up:.0f} s, busy {busy:.0f} s; {up / 3600:.3f} GPU-hours{cost} "
            "(no server_metrics.jsonl: no timeline)"
        ]
    return [t.summary(gpu_price, episodes=len(run.episodes)), *t.headline_notes()]


def _markdown(
    run: RunData,
    metrics: list[ModelMetrics],
    seeds: pd.DataFrame,
    plots: dict[str, Path],
    server: list[str],
    scaffolds: list[str],
    clusters: list[Cluster],
) -> str:
    parts = [f"# harness report: {run.name}", ""]
    if run.selected:  # the server's seconds stay the whole run's: they cannot be split by task
        parts += [f"Tasks: {run.selected}; server time is the whole run's.", ""]
    if run.warnings:
        parts += ["**Partial results:**", "", *(f"- {w}" for w in run.warnings), ""]
    parts += [_md_table(_SUMMARY_HEAD, [_summary_rows(m) for m in metrics]), ""]
    parts += [f"- {m.model}: {m.precision.sentence()}" for m in metrics if m.precision]
    if scaffolds:
        parts += ["", "## Model or scaffold?", "", *(f"- {line}" for line in scaffolds)]
    if server:
        parts += ["", "## Server", "", *(f"- {line}" for line in server)]
    if seeds_lines := _seed_lines(metrics):
        parts += ["", "## Seeds", "", *(f"- {line}" for line in seeds_lines)]
        if task_rows := _task_seed_rows(metrics):
            parts += ["", _md_table(_TASK_SEEDS_HEAD, task_rows)]
    parts.append("")
    parts += ["## Per seed", "", _md_table(_SEED_HEAD, _seed_rows(seeds)), ""]
    parts += ["## Plots", "", *(f"![{k}]({p.name})" for k, p in plots.items()), ""]
    looping = [r for r in run.records() if r.loop]
    if looping:
        parts += ["## Looping episodes", ""]
        parts += [
            f"- `{episode_id(r)}`: {r.loop.kind.value} from turn {r.loop.start_turn} "
            f"(`harness show {run.root} {episode_id(r)}`)" + (f": {r.loop.why}" if r.loop.why else "")
            for r in looping
            if r.loop
        ]
        parts.append("")
    stalled = [r for r in run.records() if r.stall]
    if stalled:
        parts += [
            "## Stalls (not loops)",
            "",
            "Varied attempts that kept getting the same failure back: still trying, so not in the loop "
            "rate, but worth a look.",
            "",
        ]
        parts += [
            f"- `{episode_id(r)}`: the same failure x{r.stall.repeats} from turn {r.stall.start_turn}, "
            f"{r.stall.attempts} different attempts (`harness show {run.root} {episode_id(r)}`): {r.stall.unit}"
            for r in stalled
            if r.stall
        ]
        parts.append("")
    parts += causes_markdown(run.records())
    parts += clusters_markdown(clusters, episode_id, str(run.root))
    parts += _tamper_section(run)
    parts += ["## Manifest", "", *manifest_markdown(run.manifest), ""]
    return "\n".join(parts)


def _tamper_section(run: RunData) -> list[str]:
    """Tamper findings: the rate per model (a MODEL@SCAFFOLD label is one arm: per scaffold too)
    and each episode's first finding. Evidence beside the scores, which verification alone decides."""
    records = run.records()
    tampered = [r for r in records if r.tamper]
    if not tampered:
        return []
    parts = [
        "## Tamper findings",
        "",
        "Calls that touched what grading relies on (tests, pytest configuration, plugin metadata, "
        "bytecode, start-up hooks, reward files, PATH shadows). Evidence for the reader, never a score: "
        "an honest agent that adds a test is here too.",
        "",
    ]
    models = sorted({r.model for r in records})
    for model in models:
        mine = [r for r in records if r.model == model]
        hits = [r for r in mine if r.tamper]
        solved = sum(1 for r in hits if (r.reward or 0) >= 1)
        parts.append(
            f"- {model}: {len(hits)}/{len(mine)} episodes ({100 * len(hits) / len(mine):.0f}%), "
            f"{solved} of them resolved"
        )
    parts.append("")
    for r in tampered:
        first = r.tamper[0]
        more = f" (+{len(r.tamper) - 1} more)" if len(r.tamper) > 1 else ""
        parts.append(
            f"- `{episode_id(r)}` turn {first.turn}: {first.target} `{first.path}`{more} "
            f"(`harness show {run.root} {episode_id(r)}`)"
        )
    parts.append("")
    return parts


def _episode_views(run: RunData, clusters: list[Cluster]) -> list[EpisodeView]:
    checks = run_checks(run)
    records = run.records()
    if len(records) > EMBED_LIMIT:
        # the clusters' examples first (the report links them), then loops, errors, format errors
        examples = {id(r) for c in clusters[:CLUSTERS_SHOWN] for r in c.episodes[:EXAMPLES]}
        records.sort(
            key=lambda r: (id(r) not in examples, r.loop is None, r.status != "error", not r.format_errors)
        )
        records = records[:EMBED_LIMIT]
    return [load_episode(run.root, r, checks(r)) for r in records]


def _clip(text: str) -> str:
    if len(text) <= _TEXT_LIMIT:
        return text
    return (
        text[:_TEXT_LIMIT]
        + f"\n… ({len(text) - _TEXT_LIMIT} more characters; full text in the trajectory file)"
    )


def _anchor(ep_id: str) -> str:
    return "ep-" + "".join(c if c.isalnum() else "-" for c in ep_id)


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2330;max-width:1200px}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f7}.partial{background:#fff4d6;border:2px solid #e0a800;padding:8px 12px;margin:12px 0}
.plots{display:flex;flex-wrap:wrap;align-items:flex-start}
img.plot{width:calc(50% - 14px);max-width:660px;margin:6px;border:1px solid #dde}
img#plot-timeline{width:calc(100% - 14px);max-width:900px}
.turn{border:1px solid #dde;margin:6px 0;padding:6px 10px;border-radius:4px}
.turn.in-loop{background:#fff3e0;border-color:#f0b060}
.turn.loop-onset{background:#ffd9a8;border:3px solid #d9480f}
.onset-label{color:#b02a00;font-weight:bold}.unit{background:#ffe8cc;padding:2px 6px;font-family:monospace;white-space:pre-wrap}
.fmt{display:inline-block;background:#fde2e2;color:#9b1c1c;border-radius:3px;padding:1px 6px;margin:2px;font-size:12px}
pre{white-space:pre-wrap;margin:4px 0;background:#f7f8fa;padding:4px 6px;max-height:320px;overflow:auto}
.status-resolved{color:#1e7b34}.status-error{color:#b02a00}.status-loop_stopped{color:#b35c00}
"""

_JS = """
function applyFilters(){
  const f={};document.querySelectorAll('select.filter').forEach(s=>f[s.dataset.key]=s.value);
  let shown=0;
  document.querySelectorAll('tr.ep-row').forEach(r=>{
    const ok=Object.entries(f).every(([k,v])=>!v||r.dataset[k]===v);
    r.style.display=ok?'':'none';if(ok)shown++;
    const sec=document.getElementById(r.dataset.anchor);if(sec)sec.style.display=ok?'':'none';
  });
  document.getElementById('shown').textContent=shown;
}
function openEpisode(){
  const id=location.hash.slice(1);const sec=id&&document.getElementById(id);if(!sec)return;
  const d=sec.querySelector('details');if(d)d.open=true;
  (sec.querySelector('.loop-onset')||sec).scrollIntoView({block:'center'});
}
window.addEventListener('hashchange',openEpisode);
window.addEventListener('DOMContentLoaded',()=>{applyFilters();openEpisode();});
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _html_table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><tr>{th}</tr>{trs}</table>'


def _img(name: str, path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img class="plot" id="plot-{name}" alt="{name} plot" src="data:image/png;base64,{data}">'


def _turn_html(view: EpisodeView, i: int) -> str:
    tv = view.turns[i]
    t = tv.turn
    cls = "turn" + (" in-loop" if tv.in_loop else "") + (" loop-onset" if tv.onset else "")
    parts = [f'<div class="{cls}" id="{_anchor(view.id)}-t{t.index}"><b>turn {t.index}</b>']
    if tv.onset and view.record.loop:
        loop = view.record.loop
        parts.append(
            f' <span class="onset-label">▶ loop starts here: {_e(loop.kind.value)}, period {loop.period}, '
            f"x{loop.repeats} (certain at turn {loop.detected_at})</span><div>repeated unit: "
            f'<span class="unit">{_e(loop.unit)}</span></div>'
            + (f"<div>why: {_e(loop.why)}</div>" if loop.why else "")
        )
    parts += [f'<span class="fmt">{_e(err)}</span>' for err in tv.errors]
    if t.text:
        parts.append(f"<pre>{_e(_clip(t.text))}</pre>")
    for call in t.tool_calls:
        parts.append(f"<div>→ <b>{_e(call.name)}</b></div><pre>{_e(_clip(call.arguments))}</pre>")
    if t.observation:
        label = "error" if t.observation_is_error else "observation"
        parts.append(f"<div><i>{label}</i></div><pre>{_e(_clip(t.observation))}</pre>")
    return "".join(parts) + "</div>"


def _episode_html(view: EpisodeView) -> str:
    r = view.record
    loop = f", {r.loop.kind.value} from turn {r.loop.start_turn}" if r.loop else ""
    err = f" — {_e(r.error.type)}: {_e(r.error.message[:300])}" if r.error else ""
    notes = "".join(f"<div><i>{_e(n)}</i></div>" for n in view.notes)
    body = "".join(_turn_html(view, i) for i in range(len(view.turns)))
    return (
        f'<section class="episode" id="{_anchor(view.id)}"><details><summary><b>{_e(view.id)}</b>: '
        f'<span class="status-{_e(r.status)}">{_e(r.status)}</span>{_e(loop)}, {r.turns} turns{err}</summary>'
        f"{notes}{body}</details></section>"
    )


def _filters(frame: pd.DataFrame) -> str:
    out = []
    for key, col, label in (
        ("model", "model", "model"),
        ("status", "status", "status"),
        ("loop", "loop_kind", "loop kind"),
        ("task", "task_id", "task"),
    ):
        values = sorted({str(v) if v is not None else "none" for v in frame[col].tolist()})
        opts = '<option value="">all</option>' + "".join(
            f'<option value="{_e(v)}">{_e(v)}</option>' for v in values
        )
        out.append(
            f'<label>{label} <select class="filter" data-key="{key}" id="filter-{key}" onchange="applyFilters()">{opts}</select></label> '
        )
    return "".join(out) + ' — <span id="shown"></span> shown'


def _episode_rows(records: list[EpisodeRecord]) -> str:
    rows = []
    for r in records:
        ep = episode_id(r)
        loop = r.loop.kind.value if r.loop else "none"
        at = f" @ {r.loop.start_turn}" if r.loop else ""
        reward = "" if r.reward is None else f"{r.reward:g}"
        rows.append(
            f'<tr class="ep-row" data-model="{_e(r.model)}" data-status="{_e(r.status)}" data-loop="{_e(loop)}" '
            f'data-task="{_e(r.task_id)}" data-anchor="{_anchor(ep)}"><td><a href="#{_anchor(ep)}">{_e(ep)}</a></td>'
            f'<td class="status-{_e(r.status)}">{_e(r.status)}</td><td>{reward}</td><td>{_e(loop)}{at}</td>'
            f"<td>{sum(r.format_errors.values())}</td><td>{r.turns}</td>"
            f"<td>{r.prompt_tokens + r.completion_tokens}</td></tr>"
        )
    head = "".join(
        f"<th>{h}</th>" for h in ("episode", "status", "reward", "loop", "format errors", "turns", "tokens")
    )
    return f'<table id="episodes"><tr>{head}</tr>{"".join(rows)}</table>'


def _failures_html(run: RunData, clusters: list[Cluster], embedded: set[str]) -> str:
    """Why episodes failed (causes by model) and the clusters, each example linked to its
    trajectory below (or named, where it is not embedded)."""
    if not clusters:
        return ""
    records = run.records()
    failures = [(r.model, f) for r in records if (f := failure_of(r)) is not None]
    table = _html_table(*cause_table(failures, Counter(r.model for r in records)), "causes")
    items = []
    for c in clusters[:CLUSTERS_SHOWN]:
        models = ", ".join(f"{_e(m)} {n}" for m, n in sorted(c.models.items()))
        links = ", ".join(
            f'<a href="#{_anchor(ep)}">{_e(ep)}</a>' if ep in embedded else _e(ep)
            for ep in (episode_id(r) for r in c.episodes[:EXAMPLES])
        )
        items.append(
            f'<li class="cluster"><b>{len(c.episodes)} episodes</b>: <code>{_e(c.signature)}</code> '
            f"({models}); e.g. {links}</li>"
        )
    more = ""
    if len(clusters) > CLUSTERS_SHOWN:
        rest = sum(len(c.episodes) for c in clusters[CLUSTERS_SHOWN:])
        more = f"<li>and {len(clusters) - CLUSTERS_SHOWN} smaller clusters ({rest} episodes)</li>"
    return f'<h2>Why episodes failed</h2>{table}<h3>Failure clusters</h3><ul id="clusters">{"".join(items)}{more}</ul>'


def _seeds_html(metrics: list[ModelMetrics]) -> str:
    lines = _seed_lines(metrics)
    if not lines:
        return ""
    rows = _task_seed_rows(metrics)
    table = _html_table(_TASK_SEEDS_HEAD, rows, "task-seeds") if rows else ""
    return f'<h2>Seeds</h2><ul id="seeds">{"".join(f"<li>{_e(x)}</li>" for x in lines)}</ul>{table}'


def _html(
    run: RunData,
    metrics: list[ModelMetrics],
    seeds: pd.DataFrame,
    plots: dict[str, Path],
    views: list[EpisodeView],
    server: list[str],
    scaffolds: list[str],
    clusters: list[Cluster],
) -> str:
    warn = ""
    if run.warnings:
        warn = (
            '<div class="partial" id="partial"><b>Partial results:</b><ul>'
            + "".join(f"<li>{_e(w)}</li>" for w in run.warnings)
            + "</ul></div>"
        )
    embedded = ""
    if len(views) < len(run.episodes):
        embedded = f"<p><i>{len(views)} of {len(run.episodes)} trajectories embedded (loops, errors and format errors first); use harness show for the rest.</i></p>"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>harness report: {_e(run.name)}</title>"
        f"<style>{_CSS}</style><script>{_JS}</script></head><body>"
        f"<h1>harness report: {_e(run.name)}</h1>{warn}"
        f"{_html_table(_SUMMARY_HEAD, [_summary_rows(m) for m in metrics], 'summary')}"
        + "".join(f"<p>{_e(m.model)}: {_e(m.precision.sentence())}</p>" for m in metrics if m.precision)
        + (
            f'<h2>Model or scaffold?</h2><ul id="scaffolds">{"".join(f"<li>{_e(x)}</li>" for x in scaffolds)}</ul>'
            if scaffolds
            else ""
        )
        + (
            f'<h2>Server</h2><ul id="server">{"".join(f"<li>{_e(x)}</li>" for x in server)}</ul>'
            if server
            else ""
        )
        + _seeds_html(metrics)
        + _failures_html(run, clusters, {v.id for v in views})
        + f"<h2>Per seed</h2>{_html_table(_SEED_HEAD, _seed_rows(seeds))}"
        f'<h2>Plots</h2><div class="plots">{"".join(_img(k, p) for k, p in plots.items())}</div>'
        f"<h2>Episodes</h2><div>{_filters(run.episodes)}</div>{_episode_rows(run.records())}"
        f"<h2>Trajectories</h2>{embedded}{''.join(_episode_html(v) for v in views)}"
        f'<h2>Manifest</h2><ul id="manifest">{"".join(f"<li>{_e(x)}</li>" for x in manifest_lines(run.manifest))}</ul>'
        "</body></html>"
    )
