"""OpenHands' own stuck detector, as a loop finding.

The SDK's StuckDetector (openhands.sdk.conversation.stuck_detector) ends a conversation with status
STUCK when it sees, since the last user message: the same action and observation 4 times, the same
action failing 4 times, 6 actions alternating between two (action, observation) pairs, or 3 agent
messages in a row. It compares single actions, so a turn with two identical calls counts twice:
it can stop an episode before the harness's monitor, which counts turns, is certain. Its
``is_stuck()`` returns only True; what it saw is in the WARNING it logs just before. So the episode
thread's stuck-detector log lines are captured (``StuckReasons``), and the SDK's words are mapped
to a loop kind with its onset read off the episode's own turns (``finding_from_stuck``); the SDK's
words are kept in the finding (``scaffold_reason``).

Written for openhands-sdk 1.58 (its messages below); an unknown or missing message still gives a
finding, inferred from the turns, with the reason saying so.
"""

import json
import logging
import threading
from types import TracebackType

from harness.monitor import LoopFinding, LoopKind, Turn

__all__ = ["StuckReasons", "finding_from_stuck"]

STUCK_LOGGER = "openhands.sdk.conversation.stuck_detector"

# The SDK's message -> (kind, period in actions, what it means in words)
_REASONS: dict[str, tuple[LoopKind, int, str]] = {
    "Action, Observation loop detected": (LoopKind.repeat_call, 1, "the same call with the same observation"),
    "Action, Error loop detected": (LoopKind.repeat_error, 1, "the same call failing with the same error"),
    "Alternating Action, Observation loop detected": (
        LoopKind.cycle,
        2,
        "two calls alternating, each with the same observation",
    ),
}
_MONOLOGUE = "agent monologue (messages without a tool call in a row; the SDK logs no reason for it)"


class StuckReasons(logging.Handler):
    """Captures, while installed, the stuck detector's WARNINGs logged by this thread (the one that
    runs the conversation: the SDK checks for loops between steps, in ``run()``'s own thread)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reasons: list[str] = []
        self._thread = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self._thread:
            self.reasons.append(record.getMessage())

    def __enter__(self) -> "StuckReasons":
        logging.getLogger(STUCK_LOGGER).addHandler(self)
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        logging.getLogger(STUCK_LOGGER).removeHandler(self)

    @property
    def last(self) -> str | None:
        return self.reasons[-1] if self.reasons else None


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):
        return arguments


def _trailing(keys: list[tuple[str, ...]], period: int) -> int:
    """Length of the run at the end of ``keys`` in which each key equals the one ``period`` before."""
    if len(keys) < period:
        return 0
    run, i = period, len(keys) - 1 - period
    while i >= 0 and keys[i] == keys[i + period]:
        run, i = run + 1, i - 1
    return run


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def finding_from_stuck(turns: list[Turn], reason: str | None) -> LoopFinding | None:
    """The loop the SDK's stuck detector saw, located in ``turns``; None without any turn.

    Actions are the SDK's unit (each tool call of a turn is one), so ``repeats`` counts calls and
    ``start_turn`` is the turn of the first repeated call.
    """
    if not turns:
        return None
    last = turns[-1].index
    said = f"OpenHands' stuck detector stopped the episode: {reason or 'no reason logged'}"
    if reason in _REASONS or turns[-1].tool_calls:
        kind, period, what = _REASONS.get(reason or "", (LoopKind.repeat_call, 1, "the same call repeated"))
        steps = [
            (t.index, (c.name, _canonical(c.arguments), t.observation, str(t.observation_is_error)))
            for t in turns
            for c in t.tool_calls
        ]
        run = max(_trailing([k for _, k in steps], period), min(period, len(steps)))
        block = steps[len(steps) - run : len(steps) - run + period]
        unit = " -> ".join(f"{name}({args})" for _, (name, args, *_) in block) or "(no call)"
        return LoopFinding(
            kind=kind,
            start_turn=steps[-run][0] if steps else last,
            period=period,
            repeats=max(1, run // period),
            unit=_short(unit),
            detected_at=last,
            why=f"{said} ({what}, {run} calls in a row)",
            scaffold_reason=reason or "stuck (no reason logged)",
        )
    # Agent messages without a tool call in a row: the SDK's monologue check (it logs nothing).
    silent = 0
    while silent < len(turns) and not turns[-1 - silent].tool_calls:
        silent += 1
    silent = max(silent, 1)
    return LoopFinding(
        kind=LoopKind.repeat_output,
        start_turn=turns[-silent].index,
        period=1,
        repeats=silent,
        unit=_short(turns[-1].text) or "(empty response)",
        detected_at=last,
        why=f"OpenHands' stuck detector stopped the episode: {reason or _MONOLOGUE}",
        scaffold_reason=reason or _MONOLOGUE,
    )
