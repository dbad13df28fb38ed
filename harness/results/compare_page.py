"""`harness compare A B --html`: base vs fine-tuned on one page, the tasks that moved side by side.

The page holds the gate's verdict (when a gate was asked for), the power statement, the paired
table, the flip table, and the tasks that did not flip but whose loop or format-error outcome
moved (a loop rate from 85% to 15% with no flip has its episodes to look at too); each such task
links to its episodes of A and B in two columns, seed by seed, with loop onsets and format errors
marked as in the run report. Self-contained: one HTML file, no network.
"""

import html
from collections.abc import Callable
from pathlib import Path

from harness.results.compare import Comparison, OutcomeChange
from harness.results.episode_view import EpisodeView, TurnChecks, load_episode
from harness.results.plots import color_of
from harness.results.report import _CSS, _turn_html, run_checks
from harness.results.runs import RunData
from harness.results.store import EpisodeRecord

_PAGE_CSS = """
.verdict{font-size:18px;padding:10px 14px;border-radius:6px;margin:10px 0;border:2px solid}
.verdict.PASS{background:#e6f4ea;border-color:#3a9d5d}.verdict.BLOCK{background:#fde2e2;border-color:#b6443b}
.verdict.WARN{background:#fff4d6;border-color:#e0a800}
.pair{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:14px;margin:8px 0 24px}
.side{border-top:5px solid;padding-top:4px;min-width:0}
.side h4{margin:4px 0}
.fixed{color:#1e7b34;font-weight:bold}.broken{color:#b02a00;font-weight:bold}.changed{color:#b35c00;font-weight:bold}
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def flip_anchor(task_id: str) -> str:
    return "flip-" + "".join(c if c.isalnum() else "-" for c in task_id)


def _records(run: RunData, model: str, task_id: str) -> dict[int, EpisodeRecord]:
    return {r.seed: r for r in run.records() if r.model == model and r.task_id == task_id}


def _side(label: str, color: str, view: EpisodeView | None, seed: int) -> str:
    if view is None:
        return f'<div class="side" style="border-color:{color}"><h4>{_e(label)} seed {seed}</h4><i>no episode</i></div>'
    r = view.record
    loop = f"; loop {r.loop.kind.value} from turn {r.loop.start_turn}" if r.loop else ""
    fmt = sum(r.format_errors.values())
    reward = "-" if r.reward is None else f"{r.reward:g}"
    notes = "".join(f"<div><i>{_e(n)}</i></div>" for n in view.notes)
    turns = "".join(_turn_html(view, i) for i in range(len(view.turns)))
    return (
        f'<div class="side" style="border-color:{color}"><h4>{_e(label)} seed {seed}: '
        f'<span class="status-{_e(r.status)}">{_e(r.status)}</span>, reward {reward}, {r.turns} turns, '
        f"{fmt} format error(s){_e(loop)}</h4>{notes}{turns}</div>"
    )


# Tasks whose loop or format-error outcome moved, shown side by side; the table lists them all.
CHANGED_SHOWN = 30


def change_anchor(task_id: str) -> str:
    return "changed-" + "".join(c if c.isalnum() else "-" for c in task_id)


def _task_section(
    task_id: str,
    anchor: str,
    title: str,
    c: Comparison,
    a: RunData,
    b: RunData,
    checks_a: Callable[[EpisodeRecord], TurnChecks | None],
    checks_b: Callable[[EpisodeRecord], TurnChecks | None],
) -> str:
    ra, rb = _records(a, c.model_a, task_id), _records(b, c.model_b, task_id)
    rows = []
    for seed in sorted(set(ra) | set(rb)):
        va = load_episode(a.root, ra[seed], checks_a(ra[seed])) if seed in ra else None
        vb = load_episode(b.root, rb[seed], checks_b(rb[seed])) if seed in rb else None
        rows.append(
            f'<div class="pair">{_side("A " + c.a, color_of(0), va, seed)}{_side("B " + c.b, color_of(1), vb, seed)}</div>'
        )
    return f'<section class="flip" id="{anchor}"><h3>{_e(task_id)}: {title}</h3>{"".join(rows)}</section>'


def _changed_table(c: Comparison) -> str:
    if not c.changed:
        return "<p>No other task's loop or format-error outcome changed.</p>"
    rows = [
        f'<tr><td><a href="#{change_anchor(x.task_id)}">{_e(x.task_id)}</a></td>'
        f"<td>{100 * x.loop_a:.0f}%</td><td>{100 * x.loop_b:.0f}%</td>"
        f"<td>{100 * x.format_a:.0f}%</td><td>{100 * x.format_b:.0f}%</td></tr>"
        for x in c.changed
    ]
    head = "<tr><th>task</th><th>loops A</th><th>loops B</th><th>format errors A</th><th>format errors B</th></tr>"
    more = (
        f"<p><i>The first {CHANGED_SHOWN} of {len(c.changed)} are shown side by side below.</i></p>"
        if len(c.changed) > CHANGED_SHOWN
        else ""
    )
    return f'<table id="changed">{head}{"".join(rows)}</table>{more}'


def _changed_title(x: OutcomeChange) -> str:
    return f'<span class="changed">{_e(x.what())}</span> (resolved the same in A and B)'


def _paired_rows(c: Comparison) -> str:
    def row(metric: str, va: str, vb: str, d: str) -> str:
        return f"<tr><td>{_e(metric)}</td><td>{_e(va)}</td><td>{_e(vb)}</td><td>{_e(d)}</td></tr>"

    ci = (
        "no spread across tasks"
        if c.se == 0
        else f"SE {100 * c.se:.1f}, 95% CI {100 * c.ci_low:+.1f} to {100 * c.ci_high:+.1f}"
    )
    out = [
        row("resolved", f"{100 * c.rate_a:.1f}%", f"{100 * c.rate_b:.1f}%", f"{100 * c.diff:+.1f} ({ci})"),
        row("p-value", "", "", f"{c.p_value:.4g} ({c.test})"),
        row(
            "loop rate",
            f"{100 * c.loop_rate.a:.1f}%",
            f"{100 * c.loop_rate.b:.1f}%",
            f"{100 * c.loop_rate.diff:+.1f}",
        ),
    ]
    out += [
        row(f"  {k}", f"{100 * v.a:.1f}%", f"{100 * v.b:.1f}%", f"{100 * v.diff:+.1f}")
        for k, v in c.loop_rates.items()
    ]
    out += [
        row(f"{k} / turn", f"{v.a:.3f}", f"{v.b:.3f}", f"{v.diff:+.3f}")
        for k, v in c.format_errors_per_turn.items()
    ]
    return (
        '<table id="paired"><tr><th>metric</th><th>A</th><th>B</th><th>B - A</th></tr>'
        + "".join(out)
        + "</table>"
    )


def _flip_table(c: Comparison) -> str:
    rows = [
        f'<tr><td><a href="#{flip_anchor(f.task_id)}">{_e(f.task_id)}</a></td><td>{f.a:.2f}</td><td>{f.b:.2f}</td>'
        f'<td class="{kind}">{kind}</td></tr>'
        for kind, flips in (("fixed", c.fixed), ("broken", c.broken))
        for f in flips
    ]
    if not rows:
        return "<p>No task flipped: A and B scored the same on every task.</p>"
    return (
        '<table id="flips"><tr><th>task</th><th>A</th><th>B</th><th></th></tr>' + "".join(rows) + "</table>"
    )


def _causes_table(c: Comparison) -> str:
    if not c.causes:
        return "<p>No episode failed in A or B.</p>"
    head = "".join(f"<th>{h}</th>" for h in ("cause", "A", "B", "tasks B fixed", "tasks B added"))
    rows = "".join(
        f"<tr><td>{_e(m.cause.replace('_', ' '))}</td><td>{m.a}</td><td>{m.b}</td><td>{m.fixed}</td>"
        f"<td>{m.added}</td></tr>"
        for m in c.causes
    )
    return (
        f'<p id="causes-sentence">{_e(c.causes_sentence)}</p><table id="causes"><tr>{head}</tr>{rows}</table>'
    )


def _attribution(c: Comparison) -> str:
    """One model under two scaffolds: whether its loops and format errors follow a scaffold or it."""
    if c.attribution is None:
        return ""
    return (
        f'<p id="attribution" class="verdict WARN"><b>Model or scaffold?</b> {_e(c.attribution.sentence)}</p>'
    )


def page_path(path: Path, c: Comparison, *, several: bool) -> Path:
    """Where --html FILE puts ``c``'s page: FILE itself, or with several comparisons (each model's
    scaffolds in turn) FILE-MODEL.html beside it."""
    if not several:
        return path
    name = c.attribution.model if c.attribution else c.model_a
    tag = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)
    return path.with_name(f"{path.stem}-{tag}{path.suffix}")


def write_compare_page(c: Comparison, a: RunData, b: RunData, path: Path) -> Path:
    """Write the comparison page of ``c`` (made from runs a and b) to ``path``."""
    checks_a = run_checks(a)
    checks_b = checks_a if b is a else run_checks(b)
    verdict = (
        f'<div class="verdict {c.gate.verdict}" id="verdict">{_e(c.gate.line())}</div>' if c.gate else ""
    )
    notes = "".join(f"<li>{_e(n)}</li>" for n in c.notes)
    flips = [("fixed", f) for f in c.fixed] + [("broken", f) for f in c.broken]
    sections = "".join(
        _task_section(
            f.task_id,
            flip_anchor(f.task_id),
            f'<span class="{kind}">{kind}</span> (A {f.a:.2f} -> B {f.b:.2f})',
            c,
            a,
            b,
            checks_a,
            checks_b,
        )
        for kind, f in flips
    )
    changed = "".join(
        _task_section(x.task_id, change_anchor(x.task_id), _changed_title(x), c, a, b, checks_a, checks_b)
        for x in c.changed[:CHANGED_SHOWN]
    )
    legend = (
        f'<p><span style="color:{color_of(0)}">&#9632;</span> A = {_e(c.a)} ({c.seeds_a} seed(s)) &nbsp; '
        f'<span style="color:{color_of(1)}">&#9632;</span> B = {_e(c.b)} ({c.seeds_b} seed(s)); {c.tasks} tasks</p>'
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>harness compare: {_e(c.a)} vs {_e(c.b)}</title>"
        f"<style>{_CSS}{_PAGE_CSS}</style></head><body>"
        f"<h1>{_e(c.a)} vs {_e(c.b)}</h1>{legend}{verdict}"
        f'<p id="sentence"><b>{_e(c.verdict())}</b></p>{_attribution(c)}<p id="power">{_e(c.power.sentence())}</p>'
        + (f"<ul>{notes}</ul>" if notes else "")
        + f"<h2>Paired by task</h2>{_paired_rows(c)}"
        f"<h2>Tasks that flipped ({len(c.fixed)} fixed, {len(c.broken)} broken; {c.both_solved} solved by both, "
        f"{c.both_failed} failed by both)</h2>{_flip_table(c)}"
        f"<h2>Flipped tasks, A and B side by side</h2>{sections}"
        f"<h2>Why episodes failed, paired by task</h2>{_causes_table(c)}"
        f"<h2>Loop or format-error outcome changed ({len(c.changed)} tasks that did not flip)</h2>"
        f"{_changed_table(c)}{changed}</body></html>"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path
