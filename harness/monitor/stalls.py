"""Stalls: varied attempts that keep getting the same failure back (edit/test thrashing).

By the labelling rubric this is not a loop: the agent is still trying different things, so it is
never counted in the loop rate and never stops an episode. But the same failure returned many
times over is worth seeing, so it is its own finding, beside the loop finding, with its onset
(the first attempt that got that failure) and how often it came back.

A turn counts when it ran something (a tool call the scaffold did not refuse) and its result is a
failure (flagged by the tool, or reading as one) that says something (not an exit code around
empty output). The failure is compared after normalisation
(the numbers a tool renumbers, durations, paths in /tmp masked). Turns that do not fail (the
edits between two test runs) do not break a stall unless ``gap`` of them pass without the failure
coming back; a different failure starts a new count. The same call failing alike every time is
a loop (``repeat_error``), not a stall: a stall needs at least two different attempts.
"""

import re

from pydantic import BaseModel, ConfigDict, Field

from harness.monitor.normalize import (
    canonical_arguments,
    looks_failed,
    normalize_observation,
    refused,
    without_echo,
)
from harness.monitor.records import Turn


class StallConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    repeats: int = Field(4, ge=2, description="Times the same failure comes back to make a stall.")
    attempts: int = Field(2, ge=2, description="Different actions tried meanwhile, at least.")
    gap: int = Field(6, ge=1, description="Turns without that failure after which it is over.")


class StallFinding(BaseModel):
    model_config = ConfigDict(frozen=True)

    start_turn: int = Field(description="The first turn that got the failure.")
    repeats: int = Field(description="How many turns got it (so far, online).")
    attempts: int = Field(description="How many different actions the agent tried meanwhile.")
    unit: str = Field(description="The failure, shortened for display.")
    detected_at: int = Field(description="The turn at which it became a stall.")
    why: str = Field("", description="What repeated, in words.")


# A failure worth counting says something: an exit code around empty output (a grep that matched
# nothing, a test selection that found none) is no error message to be stuck on.
_WRAPPING = re.compile(r"</?(?:returncode|output|exception|error)>|exit (?:code|status)\W*|\d+", re.I)
_SUBSTANCE = 20
# Test runners' failures, which a shell does not flag and which read as no error to looks_failed:
# pytest's "1 failed" / "FAILED", unittest's "FAIL:", an assertion.
_TEST_FAILURE = re.compile(r"\b\d+ failed\b|^FAILED |^FAIL: |AssertionError|\bassert(?:ion)? failed", re.M)


def _failed(turn: Turn) -> bool:
    obs = turn.observation
    if len(obs) > 8192:
        obs = obs[:4096] + "\n" + obs[-4096:]
    return turn.observation_is_error or looks_failed(obs) or _TEST_FAILURE.search(obs) is not None


def _says_something(text: str) -> bool:
    return len(_WRAPPING.sub("", text[:2000]).strip()) >= _SUBSTANCE


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class StallDetector:
    """Online: ``feed`` each turn; the finding is returned once, the moment it is certain, and its
    count keeps growing while the failure keeps coming back (``finding``)."""

    def __init__(self, config: StallConfig | None = None) -> None:
        self.config = config or StallConfig()
        self.finding: StallFinding | None = None
        self._failure: str | None = None  # the normalised failure being counted
        self._raw = ""
        self._start = self._last = 0
        self._count = 0
        self._actions: set[str] = set()
        self._over = False  # the stall found has ended (offline: its extent is final)

    def feed(self, turn: Turn) -> StallFinding | None:
        calls = turn.tool_calls
        obs = turn.observation
        ran = bool(calls) and not (obs and refused(obs))
        failed = ran and _failed(turn) and _says_something(obs)
        action = " | ".join(f"{c.name}({canonical_arguments(c.arguments)})" for c in calls)
        if not failed:
            if self._failure is not None:
                if turn.index - self._last > self.config.gap:
                    self._end()
                elif ran:  # an attempt between two failures (the edit before the next test run)
                    self._actions.add(action)
            return None
        # A terminal's echo of the command at the start (timing, not the result: fresh8 saw it, with
        # bracketed-paste escapes before it, on the first of four failing imports only)
        seen = without_echo(obs, calls[0].arguments) if len(calls) == 1 else obs
        failure = normalize_observation(seen)
        if failure == self._failure:
            self._count += 1
            self._actions.add(action)
        else:
            self._end()
            self._failure, self._raw = failure, obs
            self._start, self._count, self._actions = turn.index, 1, {action}
        self._last = turn.index
        return self._update(turn.index)

    def _end(self) -> None:
        if self.finding is not None:
            self._over = True
        self._failure = None

    def _update(self, at: int) -> StallFinding | None:
        cfg = self.config
        if self._over or self._count < cfg.repeats or len(self._actions) < cfg.attempts:
            return None
        if self.finding is not None:
            if self.finding.start_turn == self._start:  # the same stall, going on
                self.finding = self.finding.model_copy(
                    update={"repeats": self._count, "attempts": len(self._actions)}
                )
            return None
        self.finding = StallFinding(
            start_turn=self._start,
            repeats=self._count,
            attempts=len(self._actions),
            unit=_short(self._raw),
            detected_at=at,
            why=f"the same failure came back {self._count} times while the agent tried "
            f"{len(self._actions)} different actions (still trying: not a loop)",
        )
        return self.finding


def detect_stall(turns: list[Turn], config: StallConfig | None = None) -> StallFinding | None:
    """Offline: the first stall of a trajectory, counted to where it ends."""
    detector = StallDetector(config)
    for turn in turns:
        detector.feed(turn)
    return detector.finding
