"""`harness loops`: a row per episode (loop kind, onset, period, repeats, waste; a stall beside it)
and totals."""

from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness.monitor import LoopConfig, StallFinding, detect_loops, detect_stall
from harness.results.trajectories import ReadResult, Trajectory, scan_trajectories


class LoopRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    episode: str
    source: str
    turns: int
    loop_kind: str | None
    start_turn: int | None
    period: int | None
    repeats: int | None
    unit: str | None
    why: str | None = None  # what matched, in words (LoopFinding.why)
    turns_after_onset: int
    tokens_after_onset: int | None  # None when the source has no token counts
    error: str | None
    # varied attempts getting the same failure back: reported beside loops, never one
    stall: StallFinding | None = None


class LoopTotals(BaseModel):
    episodes: int
    looping: int
    by_kind: dict[str, int]
    stalled: int = 0  # episodes with a stall (not counted in looping)
    turns: int
    turns_after_onset: int
    tokens_after_onset: int
    skipped_lines: int
    warnings: int


class LoopsReport(BaseModel):
    format: str
    rows: list[LoopRow]
    totals: LoopTotals
    warnings: list[str]


def _row(t: Trajectory, config: LoopConfig | None) -> LoopRow:
    finding = detect_loops(t.turns, config)
    after = [turn for turn in t.turns if finding is not None and turn.index >= finding.start_turn]
    known = [turn for turn in after if turn.prompt_tokens is not None or turn.completion_tokens is not None]
    tokens = (
        sum((turn.prompt_tokens or 0) + (turn.completion_tokens or 0) for turn in known) if known else None
    )
    return LoopRow(
        episode=t.episode,
        source=t.source,
        turns=len(t.turns),
        loop_kind=finding.kind.value if finding else None,
        start_turn=finding.start_turn if finding else None,
        period=finding.period if finding else None,
        repeats=finding.repeats if finding else None,
        unit=finding.unit if finding else None,
        why=finding.why if finding else None,
        turns_after_onset=len(after),
        tokens_after_onset=tokens if finding else 0,
        error=t.error,
        stall=detect_stall(t.turns),
    )


def _report(result: ReadResult, rows: list[LoopRow]) -> LoopsReport:
    kinds = Counter(r.loop_kind for r in rows if r.loop_kind)
    totals = LoopTotals(
        episodes=len(rows),
        looping=sum(kinds.values()),
        by_kind=dict(kinds),
        stalled=sum(1 for r in rows if r.stall is not None),
        turns=sum(r.turns for r in rows),
        turns_after_onset=sum(r.turns_after_onset for r in rows),
        tokens_after_onset=sum(r.tokens_after_onset or 0 for r in rows),
        skipped_lines=result.skipped_lines,
        warnings=len(result.warnings),
    )
    return LoopsReport(format=result.format, rows=rows, totals=totals, warnings=result.warnings)


def analyse(result: ReadResult, config: LoopConfig | None = None) -> LoopsReport:
    return _report(result, [_row(t, config) for t in result.trajectories])


def loops_report(path: Path, config: LoopConfig | None = None) -> LoopsReport:
    # Each episode is analysed as it is read and only its row is kept (see scan_trajectories).
    return _report(*scan_trajectories(path, lambda t: _row(t, config)))
