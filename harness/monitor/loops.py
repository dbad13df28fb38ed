"""Loop detection on Turn records, online (turn by turn) and offline (a whole trajectory).

A turn's *action* is its tool calls with canonical arguments (thought text, `summary` and
`security_risk` left out), or, for a turn without a parsed call, its normalised text. Its *step*
is the action plus the normalised observation that followed. Comparing steps rather than actions
is what keeps legitimate repetition quiet: running the tests again after an edit repeats the
call but the edit changed what comes back; polling a long-running command repeats the call but
the output grows.
"""

from collections import deque
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator
from rapidfuzz.fuzz import ratio

from harness.monitor.normalize import canonical_arguments, normalize_text
from harness.monitor.records import Turn


class LoopKind(StrEnum):
    repeat_call = "repeat_call"
    cycle = "cycle"
    repeat_output = "repeat_output"
    repeat_error = "repeat_error"
    degenerate_text = "degenerate_text"


class LoopFinding(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: LoopKind
    start_turn: int = Field(description="Index of the first turn of the repeated run.")
    period: int = Field(description="Turns per repeated unit (1 for repeats, p for a cycle).")
    repeats: int = Field(description="How many times the unit occurred (so far, online).")
    unit: str = Field(description="The repeated unit, shortened for display.")
    detected_at: int = Field(description="Turn index at which the loop became certain.")


class LoopConfig(BaseModel):
    """Thresholds: how much repetition makes a loop certain."""

    model_config = ConfigDict(frozen=True)

    repeat_call: int = Field(4, ge=2, description="Identical steps (call + observation) in a row.")
    repeat_error: int = Field(3, ge=2, description="Identical failing steps in a row.")
    repeat_output: int = Field(3, ge=2, description="Near-identical text-only turns in a row.")
    max_period: int = Field(4, ge=2, description="Longest cycle period considered.")
    cycle_repeats: int = Field(3, ge=2, description="Repetitions of a cycle's unit.")
    similarity: float = Field(0.9, gt=0, le=1, description="Text similarity counted as 'the same' (0..1).")
    degenerate_min_span: int = Field(
        120, ge=10, description="Characters of self-repetition within one output."
    )
    degenerate_min_repeats: int = Field(
        5, ge=2, description="Repetitions of a line or substring within one output."
    )

    @model_validator(mode="after")
    def _sane(self) -> "LoopConfig":
        if self.cycle_repeats * 2 > 64 or self.max_period > 16:
            raise ValueError("max_period <= 16 and cycle_repeats <= 32")
        return self


# Edit-distance similarity is quadratic-ish; beyond this size texts are compared by equality.
_SIMILARITY_MAX_CHARS = 8_000
# Degenerate text shows at the end of an output; a bounded tail keeps huge outputs cheap.
_DEGENERATE_SCAN_CHARS = 32_768


def similar(a: str, b: str, threshold: float) -> bool:
    """Same, or near-same by normalised edit similarity (0..1) for texts of reasonable size."""
    if a == b:
        return True
    if len(a) > _SIMILARITY_MAX_CHARS or len(b) > _SIMILARITY_MAX_CHARS:
        return False
    if min(len(a), len(b)) < threshold * max(len(a), len(b)):
        return False  # lengths alone rule it out
    return ratio(a, b, score_cutoff=threshold * 100) >= threshold * 100


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Step:
    """What the detector keeps of one turn."""

    __slots__ = ("action", "error", "index", "key", "text", "text_only")

    def __init__(self, turn: Turn) -> None:
        self.index = turn.index
        calls = turn.tool_calls
        self.text_only = not calls
        if len(calls) == 1:  # the common case, without a generator
            self.action = f"{calls[0].name}({canonical_arguments(calls[0].arguments)})"
            self.text = ""
        elif calls:
            self.action = " | ".join(f"{c.name}({canonical_arguments(c.arguments)})" for c in calls)
            self.text = ""
        else:
            self.text = normalize_text(turn.text)
            self.action = "text:" + self.text
        observation = normalize_text(turn.observation)
        self.error = turn.observation_is_error
        self.key = hash((self.action, observation, self.error))


def degenerate_unit(text: str, min_span: int = 120, min_repeats: int = 5) -> tuple[str, int] | None:
    """(unit, repeats) when one output repeats its own lines or a substring; None otherwise."""
    if len(text) < min_span:
        return None
    text = text[-_DEGENERATE_SCAN_CHARS:]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) >= min_repeats:
        counts: dict[str, int] = {}
        for ln in lines:
            if len(ln) >= 8:
                counts[ln] = counts.get(ln, 0) + 1
        if counts:
            line, n = max(counts.items(), key=lambda kv: kv[1])
            if n >= min_repeats and n * 2 >= len(lines) and n * len(line) >= min_span:
                return line, n
    # A tail that repeats a substring (the classic runaway generation, with or without newlines).
    tail = text.rstrip()
    last, max_period = len(tail) - 1, min(400, len(tail) // min_repeats)
    period = 0
    while period < max_period:
        if min_repeats >= 2:
            # A unit repeats only if the character one period before the last equals the last:
            # rfind jumps to the next such period (prose has a few) instead of trying all 400.
            pos = tail.rfind(tail[last], last - max_period, last - period)
            if pos < 0:
                break
            period = last - pos
        else:
            period += 1
        unit = tail[-period:]
        repeats, end = 1, len(tail) - period
        while end >= period and tail[end - period : end] == unit:
            repeats += 1
            end -= period
        span = repeats * period
        needed = min_span if period >= 4 else 2 * min_span  # short units: rules and separators are fine
        if repeats >= min_repeats and span >= needed and (period > 1 or not unit.isspace()):
            return unit, repeats
    return None


class LoopDetector:
    """Online loop detection: ``feed`` each turn; the first certain loop is returned (once).

    Cost per turn is bounded by the window (max_period x cycle_repeats), not the episode length.
    """

    def __init__(self, config: LoopConfig | None = None) -> None:
        self.config = config or LoopConfig()
        window = (
            max(
                self.config.max_period * self.config.cycle_repeats,
                self.config.repeat_call,
                self.config.repeat_output,
            )
            + 1
        )
        self._steps: deque[_Step] = deque(maxlen=window)
        self._run = 0  # identical consecutive steps ending at the last turn
        self._text_run = 0  # near-identical consecutive text-only turns
        self._cycle_run = 0  # consecutive turns equal to the turn one period before
        self.finding: LoopFinding | None = None

    def feed(self, turn: Turn) -> LoopFinding | None:
        """Add a turn; return a LoopFinding the moment a loop is certain (once), else None."""
        step = _Step(turn)
        self._advance(step)
        if self.finding is not None:
            self._extend(step)
            return None
        self.finding = self._check(turn, step)
        return self.finding

    def _advance(self, step: _Step) -> None:
        prev = self._steps[-1] if self._steps else None
        self._run = self._run + 1 if prev is not None and prev.key == step.key else 1
        alike = (
            step.text_only
            and prev is not None
            and prev.text_only
            and similar(prev.text, step.text, self.config.similarity)
        )
        self._text_run = self._text_run + 1 if alike else (1 if step.text_only else 0)
        if self.finding is not None and self.finding.kind == LoopKind.cycle:
            p = self.finding.period
            back = self._steps[-p] if len(self._steps) >= p else None
            self._cycle_run = self._cycle_run + 1 if back is not None and back.key == step.key else -(10**9)
        self._steps.append(step)

    def _extend(self, step: _Step) -> None:
        """Count further repeats of the loop already found (offline reports its full extent)."""
        f = self.finding
        assert f is not None
        if f.kind == LoopKind.degenerate_text:
            return
        if f.kind == LoopKind.cycle:
            repeats = self.config.cycle_repeats + max(self._cycle_run, 0) // f.period
        else:
            repeats = self._text_run if f.kind == LoopKind.repeat_output else self._run
        if repeats > f.repeats and (f.kind != LoopKind.cycle or self._cycle_run > 0):
            self.finding = f.model_copy(update={"repeats": repeats})

    @property
    def loop_continues(self) -> bool:
        """Whether the last turn fed still belongs to the loop found."""
        f = self.finding
        if f is None:
            return False
        if f.kind == LoopKind.cycle:
            return self._cycle_run >= 0
        if f.kind == LoopKind.repeat_output:
            return self._text_run > 1
        return f.kind != LoopKind.degenerate_text and self._run > 1

    def _check(self, turn: Turn, step: _Step) -> LoopFinding | None:
        cfg = self.config
        if turn.text and (
            deg := degenerate_unit(turn.text, cfg.degenerate_min_span, cfg.degenerate_min_repeats)
        ):
            unit, n = deg
            return LoopFinding(
                kind=LoopKind.degenerate_text,
                start_turn=turn.index,
                period=1,
                repeats=n,
                unit=_short(unit),
                detected_at=turn.index,
            )
        if step.error and self._run >= cfg.repeat_error:
            unit = f"{step.action} => {_short(turn.observation, 80)}"
            return self._repeat(LoopKind.repeat_error, self._run, unit, turn.index)
        if not step.text_only and not step.error and self._run >= cfg.repeat_call:
            return self._repeat(LoopKind.repeat_call, self._run, step.action, turn.index)
        if step.text_only and not step.error and self._text_run >= cfg.repeat_output:
            return self._repeat(LoopKind.repeat_output, self._text_run, step.text or step.action, turn.index)
        steps = self._steps
        n = len(steps)
        for period in range(2, cfg.max_period + 1):
            need = period * cfg.cycle_repeats
            if n < need:
                break
            if steps[-1].key != steps[-1 - period].key:
                continue  # necessary for a cycle of this period ending here; skips the scan
            tail = list(steps)[-need:]
            periodic = all(tail[i].key == tail[i + period].key for i in range(need - period))
            if periodic and len({s.key for s in tail[:period]}) == period:
                self._cycle_run = 0
                unit = " -> ".join(_short(s.action, 60) for s in tail[:period])
                return LoopFinding(
                    kind=LoopKind.cycle,
                    start_turn=tail[0].index,
                    period=period,
                    repeats=cfg.cycle_repeats,
                    unit=unit,
                    detected_at=turn.index,
                )
        return None

    def _repeat(self, kind: LoopKind, repeats: int, unit: str, at: int) -> LoopFinding:
        start = self._steps[-repeats].index
        return LoopFinding(
            kind=kind, start_turn=start, period=1, repeats=repeats, unit=_short(unit), detected_at=at
        )


def detect_loops(turns: list[Turn], config: LoopConfig | None = None) -> LoopFinding | None:
    """Offline: the first loop in a trajectory, with its repeats counted to where it stops."""
    detector = LoopDetector(config)
    found = False
    for turn in turns:
        if detector.feed(turn) is not None:
            found = True
        elif found and not detector.loop_continues:
            break
    return detector.finding
