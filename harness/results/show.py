"""`harness show RUN [EPISODE]`: the episode list (filterable) or one trajectory in the terminal.

A looping episode opens at the turn where the loop started (earlier turns are summarised; --all
shows them), with the repeated unit and every later turn of the loop marked.
"""

import os
import stat
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from harness._text import clean, markup
from harness.errors import HarnessError
from harness.results.arms import run_arms
from harness.results.episode_view import EpisodeView, episode_id, find_episode, load_episode
from harness.results.failures import failure_of
from harness.results.report import run_checks
from harness.results.runs import RunData, load_run
from harness.results.store import VERIFIER_LOG, EpisodeRecord, RunStore
from harness.tasks.selection import select_ids

_OBS_LIMIT = 1500
VERIFIER_TAIL_LINES = 40
_VERIFIER_TAIL_BYTES = 16384
# Rows of the episode list by default: a table of 250,000 rows took 260 s and 2.9 GB to draw.
LIST_LIMIT = 50


def list_episodes(
    run: RunData,
    *,
    status: str | None = None,
    loop: str | None = None,
    task: str | tuple[str, ...] | None = None,
    model: str | None = None,
    scaffold: str | None = None,
) -> list[EpisodeRecord]:
    """The run's episodes that match every filter; ``task`` is a glob or several (any of them), each
    of which must match a task of the run (a typo is an error, not an empty list). ``model`` is an
    arm (MODEL@SCAFFOLD in a run of several scaffolds) or a model (all its arms)."""
    records = run.records()
    arms = run_arms(run)
    if model is not None and not any(model in (a.label, a.model) for a in arms):
        names = list(dict.fromkeys([a.label for a in arms] + [a.model for a in arms]))
        raise HarnessError(f"--model {model}: not in this run (here: {', '.join(names)})")
    if scaffold is not None and not any(a.scaffold == scaffold for a in arms):
        here = ", ".join(dict.fromkeys(a.scaffold or "?" for a in arms))
        raise HarnessError(f"--scaffold {scaffold}: not in this run (here: {here})")
    arm_of = {a.label: a for a in arms}
    patterns = (task,) if isinstance(task, str) else tuple(task or ())
    tasks = (
        set(select_ids({r.task_id for r in records}, patterns, where=f"the run {run.root}"))
        if patterns
        else None
    )
    kinds = {r.loop.kind.value for r in records if r.loop} | {"any", "none"}
    if loop is not None and loop not in kinds:
        raise HarnessError(f"--loop {loop}: no episode has this loop kind (here: {', '.join(sorted(kinds))})")

    def loop_matches(r: EpisodeRecord) -> bool:
        if loop is None:
            return True
        if loop in ("any", "none"):
            return (r.loop is not None) == (loop == "any")
        return r.loop is not None and r.loop.kind.value == loop

    return [
        r
        for r in records
        if (not status or r.status == status)
        and (tasks is None or r.task_id in tasks)
        and (not model or model in (r.model, arm_of[r.model].model))
        and (not scaffold or arm_of[r.model].scaffold == scaffold)
        and loop_matches(r)
    ]


def episodes_table(run: RunData, records: list[EpisodeRecord], matched: int | None = None) -> Table:
    """The list of ``records``; ``matched`` (when more matched than are listed) goes in the title."""
    shown = (
        f"{len(records)} of {matched} shown"
        if matched and matched > len(records)
        else f"{len(records)} shown"
    )
    t = Table(title=f"episodes in {markup(run.root)} ({shown})")
    for col in ("episode", "status", "reward", "loop", "format errors", "turns", "tokens"):
        t.add_column(col, overflow="fold")
    for r in records:
        fmt = markup(", ".join(f"{k} {v}" for k, v in sorted(r.format_errors.items())) or "-")
        loop = f"{r.loop.kind.value} @ turn {r.loop.start_turn}" if r.loop else "-"
        if r.stall is not None:
            loop += f"\n(stall @ turn {r.stall.start_turn}, x{r.stall.repeats})"
        if r.tamper:
            loop += f"\n(tamper @ turn {r.tamper[0].turn}, x{len(r.tamper)})"
        if (failure := failure_of(r)) is not None:
            loop += f"\n(why: {failure.cause.replace('_', ' ')})"
        t.add_row(
            markup(episode_id(r)),
            r.status,
            "-" if r.reward is None else f"{r.reward:g}",
            loop,
            fmt,
            str(r.turns),
            str(r.prompt_tokens + r.completion_tokens),
        )
    return t


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


def verifier_tail(
    root: Path, record: EpisodeRecord, lines: int = VERIFIER_TAIL_LINES
) -> tuple[Path, str] | None:
    """The end of an episode's verifier.log (its last ``lines`` lines, terminal controls removed)
    and its path; None when there is none. Read without following a link, at most a few KiB."""
    path = RunStore(root).episode_dir(record.model, record.task_id, record.seed) / VERIFIER_LOG
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device planted at that name
            return None
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, size - _VERIFIER_TAIL_BYTES))
        text = fh.read(_VERIFIER_TAIL_BYTES).decode(errors="replace")
    kept = text.rstrip("\n").splitlines()[-lines:]
    return path, clean("\n".join(kept))


def scaffold_trajectory(root: Path, record: EpisodeRecord) -> Path | None:
    """The episode's trajectory as its scaffold wrote it, beside the store's turns: mini-swe-agent's
    ``*.traj.json``, OpenHands' conversation directory; None when there is none."""
    edir = RunStore(root).episode_dir(record.model, record.task_id, record.seed)
    if edir.is_symlink() or not edir.is_dir():
        return None
    found = sorted(p for p in edir.glob("*.traj.json") if p.is_file() and not p.is_symlink())
    if found:
        return found[0]
    conversation = edir / "conversation"
    return conversation if conversation.is_dir() and not conversation.is_symlink() else None


def _verifier_panel(root: Path, r: EpisodeRecord) -> list[RenderableType]:
    """A failed episode's verifier output (the end of verifier.log); a resolved one's file named."""
    found = verifier_tail(root, r)
    if found is None or r.reward is None:
        return []
    path, tail = found
    where = Text(f"verifier output: {clean(str(path))}", style="dim")
    if r.reward >= 1.0:
        return [where]
    return [
        where,
        Panel(
            Text(tail or "(empty)"),
            title=f"verifier output (the last {VERIFIER_TAIL_LINES} lines of {VERIFIER_LOG})",
            title_align="left",
            border_style="yellow",
        ),
    ]


def episode_renderables(view: EpisodeView, *, show_all: bool = False) -> list[RenderableType]:
    r = view.record
    head = Text.assemble(
        (clean(view.id), "bold"),
        f"  scaffold {clean(r.scaffold)}" if r.scaffold else "",
        f"  status {r.status}",
        f"  reward {'-' if r.reward is None else f'{r.reward:g}'}",
        f"  {r.turns} turns, {r.tool_calls} tool calls, {r.prompt_tokens + r.completion_tokens} tokens, {r.wall_s:.1f} s",
    )
    items: list[RenderableType] = [head]
    if r.error:
        items.append(Text(clean(f"error: {r.error.type}: {r.error.message}"), style="red"))
    for n, failed in enumerate(r.retried, 1):
        items.append(Text(clean(f"attempt {n} retried: {failed.type}: {failed.message}"), style="yellow"))
    if r.format_errors:
        items.append(
            Text(
                clean("format errors: " + ", ".join(f"{k} {v}" for k, v in sorted(r.format_errors.items()))),
                style="red",
            )
        )
    items += [Text(clean(n), style="yellow") for n in view.notes]
    if r.stall is not None:
        s = r.stall
        items.append(
            Text(
                clean(
                    f"stall (not a loop): from turn {s.start_turn}, the same failure x{s.repeats} to "
                    f"{s.attempts} different attempts: {s.unit}"
                ),
                style="yellow",
            )
        )
    if (failure := failure_of(r)) is not None:
        why = failure.cause.replace("_", " ") + (f": {failure.detail}" if failure.detail else "")
        items.append(Text(clean(f"why it failed: {why}"), style="yellow"))
    if r.tamper:
        items.append(
            Text(
                clean(
                    f"tamper ({len(r.tamper)}; evidence, not a score: verification decides):\n"
                    + "\n".join(f"  turn {f.turn}: {f.target}: {f.path}: {f.command}" for f in r.tamper)
                ),
                style="magenta",
            )
        )
    turns = view.turns
    onset = view.onset_index
    if r.loop:
        loop = r.loop
        items.append(
            Panel(
                Text.assemble(
                    clean(loop.unit), *((("\nwhy: ", "bold"), clean(loop.why)) if loop.why else ())
                ),
                title=f"loop: {loop.kind.value} from turn {loop.start_turn}, period {loop.period}, "
                f"x{loop.repeats}, certain at turn {loop.detected_at}",
                title_align="left",
                border_style="bold red",
            )
        )
        if onset is not None and onset > 0 and not show_all:
            items.append(
                Text(
                    f"(turns {turns[0].turn.index}..{turns[onset - 1].turn.index} before the loop hidden; --all shows them)",
                    style="dim",
                )
            )
            turns = turns[onset:]
    # a multi-step task: where each step's agent run begins, with what its verifier gave
    starts = {st.first_turn: st for st in r.steps or [] if st.turns}
    for tv in turns:
        t = tv.turn
        if (st := starts.get(t.index)) is not None:
            got = ", ".join(f"{k} {v:g}" for k, v in (st.rewards or {}).items()) or "no verifier result"
            items.append(
                Text(clean(f"── step {st.name}: {got}{f' ({st.note})' if st.note else ''}"), style="bold")
            )
        body: list[RenderableType] = []
        if tv.onset:
            body.append(Text("▶ the loop starts here", style="bold red"))
        body += [Text(clean(f"✗ {e}"), style="red") for e in tv.errors]
        if t.text:
            body.append(Text(_clip(t.text, 3000)))
        for call in t.tool_calls:
            body.append(
                Text.assemble(
                    ("→ ", "bold"), (clean(call.name), "bold cyan"), " ", clean(_clip(call.arguments, 1500))
                )
            )
        if t.observation:
            body.append(
                Text(_clip(t.observation, _OBS_LIMIT), style="red" if t.observation_is_error else "dim")
            )
        style = "bold red" if tv.onset else ("yellow" if tv.in_loop else "blue")
        title = (
            f"turn {t.index}"
            + (" · loop" if tv.in_loop else "")
            + (
                f" · {markup(t.finish_reason)}"
                if t.finish_reason and t.finish_reason not in ("stop", "tool_calls")
                else ""
            )
        )
        items.append(
            Panel(
                Group(*body) if body else Text("(empty)", style="dim"),
                title=title,
                title_align="left",
                border_style=style,
            )
        )
    return items


def show(
    path: Path,
    episode: str | None,
    console: Console,
    *,
    show_all: bool = False,
    status: str | None = None,
    loop: str | None = None,
    task: str | tuple[str, ...] | None = None,
    model: str | None = None,
    scaffold: str | None = None,
    limit: int = LIST_LIMIT,
) -> None:
    """Print the episode list (at most ``limit`` rows; 0: all) or one episode's trajectory."""
    if limit < 0:
        raise HarnessError(f"--limit {limit}: give a number of rows, or 0 for all")
    run = load_run(path)
    for w in run.warnings:
        console.print(f"[yellow]partial:[/] {markup(w)}")
    if episode is None:
        listed = list_episodes(run, status=status, loop=loop, task=task, model=model, scaffold=scaffold)
        shown = listed[:limit] if limit else listed
        console.print(episodes_table(run, shown, len(listed)))
        if hidden := len(listed) - len(shown):
            console.print(
                f"{hidden} more episodes not listed: narrow the list with --status, --loop, --task or "
                f"--model, or show them all with --limit 0",
                highlight=False,
            )
        if listed:
            console.print(
                f"open one with: harness show {markup(run.root)} EPISODE (e.g. {markup(episode_id(listed[0]))})"
            )
        return
    record = find_episode(run.records(), episode)
    for item in episode_renderables(
        load_episode(run.root, record, run_checks(run)(record)), show_all=show_all
    ):
        console.print(item)
    if (own := scaffold_trajectory(run.root, record)) is not None:
        who = f"{record.scaffold}'s" if record.scaffold else "the scaffold's"
        console.print(Text(f"{who} own trajectory: {clean(str(own))}", style="dim"))
    for item in _verifier_panel(run.root, record):  # after the turns: what the tests said at the end
        console.print(item)
