"""An episode as the viewers show it: its record, its turns, format errors per turn, and the loop span.

Shared by `harness show` (terminal) and the HTML report, so both mark the same turns.
"""

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from harness._text import clean
from harness.errors import HarnessError
from harness.monitor import ToolSchemas, Turn, validate_turn
from harness.results.run_files import MAX_LINE_BYTES, inside_run, run_lines
from harness.results.store import EpisodeRecord


def printable(text: str) -> str:
    """Terminal control sequences in tool output (bracketed paste, colours, C1 controls) would
    garble both viewers; see harness._text."""
    return clean(text)


@dataclass(frozen=True)
class TurnChecks:
    """What a scaffold's turns are checked against, as its records' format errors were counted:
    its tool schemas, and whether several calls in one turn are its normal (parallel tool calls)."""

    schemas: ToolSchemas
    allow_multiple: bool = False


@dataclass(frozen=True)
class TurnView:
    turn: Turn
    errors: list[str]  # "category: detail", as the validator found them
    in_loop: bool
    onset: bool


@dataclass
class EpisodeView:
    record: EpisodeRecord
    turns: list[TurnView]
    notes: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return episode_id(self.record)

    @property
    def onset_index(self) -> int | None:
        """Position in `turns` of the loop's first turn, or None."""
        return next((i for i, t in enumerate(self.turns) if t.onset), None)


def episode_id(record: EpisodeRecord) -> str:
    return f"{record.model}/{record.task_id}/seed{record.seed}"


def find_episode(records: list[EpisodeRecord], spec: str) -> EpisodeRecord:
    """EPISODE as MODEL/TASK/seedN, TASK/seedN, TASK/N or TASK; it must name exactly one episode."""
    spec = spec.strip("/")
    parts = spec.split("/")
    if parts and parts[-1].isdigit():
        parts[-1] = f"seed{parts[-1]}"

    def matches(rec: EpisodeRecord) -> bool:
        # ids as printed (control characters removed), so an id shown on screen can be typed back
        full = [clean(rec.model), clean(rec.task_id), f"seed{rec.seed}"]
        n = len(parts)
        if full[-n:] == parts or full[:n] == parts:  # suffix (.../seedN) or prefix (MODEL/TASK)
            return True
        return n <= 2 and parts[0] == full[1] and (n == 1 or parts[1] == full[2])

    hits = [r for r in records if clean(episode_id(r)) == spec] or [r for r in records if matches(r)]
    if not hits:
        sample = ", ".join(episode_id(r) for r in records[:3])
        raise HarnessError(
            f"EPISODE {spec}: no such episode in this run (ids look like: {sample}); list them with harness show RUN"
        )
    if len(hits) > 1:
        listed = ", ".join(episode_id(r) for r in hits[:6])
        raise HarnessError(
            f"EPISODE {spec}: {len(hits)} episodes match ({listed}{', ...' if len(hits) > 6 else ''}); name one"
        )
    return hits[0]


def load_episode(root: Path, record: EpisodeRecord, checks: TurnChecks | None) -> EpisodeView:
    """Read the episode's trajectory; a missing or damaged file becomes a note, not an exception."""
    notes: list[str] = []
    turns: list[Turn] = []
    path = root / record.trajectory
    if record.trajectory and inside_run(root, record.trajectory) is None:
        notes.append(f"trajectory {record.trajectory!r} points outside the run directory; not opened")
    elif not record.trajectory or not path.is_file():
        notes.append(
            f"no trajectory at {path}"
            + (f" (the episode ended in error: {record.error.message})" if record.error else "")
        )
    else:
        try:
            for lineno, line in run_lines(path):
                if line is None:
                    notes.append(f"{path}: line {lineno} is longer than {MAX_LINE_BYTES >> 20} MiB; skipped")
                    continue
                if not line.strip():
                    continue
                try:
                    turns.append(Turn.model_validate_json(line))
                except ValidationError:
                    notes.append(f"{path}: line {lineno} is not a turn record; skipped")
        except (HarnessError, OSError) as exc:  # RunFileError: a device, a pipe, a huge file
            notes.append(
                str(exc) if isinstance(exc, HarnessError) else f"{path}: cannot read ({exc.strerror})"
            )
    if checks is None:
        notes.append("scaffold schemas unavailable: format errors are not shown per turn")
    start = record.loop.start_turn if record.loop else None
    views = [
        TurnView(
            turn=t.model_copy(update={"text": printable(t.text), "observation": printable(t.observation)}),
            errors=[
                f"{e.category.value}: {e.detail}" if e.detail else e.category.value
                for e in validate_turn(t, checks.schemas, allow_multiple=checks.allow_multiple).errors
            ]
            if checks
            else [],
            in_loop=start is not None and t.index >= start,
            onset=start is not None and t.index == start,
        )
        for t in turns
    ]
    return EpisodeView(record=record, turns=views, notes=notes)
