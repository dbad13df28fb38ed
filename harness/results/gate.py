"""A regression gate on a paired comparison: PASS, BLOCK or WARN, with exit codes CI can act on.

--max-drop X (non-inferiority): PASS when the lower end of the 95% CI of B - A is above -X (a drop
of X points or more is ruled out); BLOCK when its upper end is below -X (a drop larger than X is
established); WARN otherwise (the data cannot tell). --min-gain X (superiority by a margin): PASS
when the lower end is above +X, BLOCK when the upper end is below +X (B is established not to
gain X), WARN otherwise. Each end of a two-sided 95% interval is a one-sided test at 2.5%.

When no task's difference varies (every task moved by the same amount, typically none at all)
the t interval collapses to a point, which would claim certainty from, say, 20 unchanged tasks.
The gate then widens it by the exact binomial bound on how many tasks could have changed unseen:
with none of n tasks changing, the true share of changing tasks is below 1 - 0.025^(1/n)
(Clopper-Pearson, one-sided 97.5%; 17% with 20 tasks), and a task changes by at most 1.

Tasks that one run has no score for (its episodes ended infra_error, were not verified, or never
ran) are left out of B - A, and what they would have scored is unknown: with any such task the
gate says WARN at best (a BLOCK stands: the scored tasks alone establish it).
"""

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from harness.errors import HarnessError

Verdict = Literal["PASS", "BLOCK", "WARN"]
EXIT_CODES: dict[str, int] = {"PASS": 0, "BLOCK": 1, "WARN": 2}


class GateResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    rule: Literal["max_drop", "min_gain"]
    threshold: float  # as a fraction of 1 (5 points = 0.05)
    verdict: Verdict
    low: float | None  # the bounds the verdict read (None: too few tasks)
    high: float | None
    reason: str

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def line(self) -> str:
        return f"{self.verdict}: {self.reason}"


def threshold(points: float | None, flag: str) -> float | None:
    """A --max-drop / --min-gain value as a fraction; a one-line error when it is none.

    X is in points (0..100); a value strictly between 0 and 1 is read as a fraction (0.05 is 5
    points): a gate of under one point is below what any task suite resolves, so 0.05 means 5%.
    ``threshold_note`` says which reading was taken."""
    if points is None:
        return None
    if not math.isfinite(points) or not 0 <= points <= 100:
        raise HarnessError(
            f"{flag} {points:g}: must be between 0 and 100 points of resolve rate (e.g. {flag} 5)"
        )
    return points if 0 < points < 1 else points / 100


def threshold_note(points: float | None, flag: str) -> str | None:
    """What ``threshold`` understood, when it read the value as a fraction; None otherwise."""
    if points is None or not 0 < points < 1:
        return None
    return (
        f"{flag} {points:g} read as a fraction: {100 * points:g} points of resolve rate "
        f"(write {flag} {100 * points:g} to say so, or {flag} 1 for one point)"
    )


def bounds(diff: float, se: float, ci_low: float, ci_high: float, tasks: int) -> tuple[float, float] | None:
    """The 95% bounds on B - A the gate reads: the t interval, or with no spread across tasks the
    exact bound on what the tasks could hide (module docstring); None with too few tasks."""
    if math.isnan(se) or tasks < 2:
        return None
    if se == 0:
        unseen = 1.0 - 0.025 ** (1.0 / tasks)
        return max(-1.0, diff - unseen), min(1.0, diff + unseen)
    return ci_low, ci_high


def gate(
    *,
    diff: float,
    se: float,
    ci_low: float,
    ci_high: float,
    tasks: int,
    max_drop: float | None = None,
    min_gain: float | None = None,
    power_note: str = "",
    incomplete: str = "",
) -> GateResult:
    """The verdict for one rule (max_drop or min_gain, as fractions); power_note explains a WARN;
    ``incomplete`` names the tasks without a score on a side (a PASS becomes WARN)."""
    result = _verdict(diff, se, ci_low, ci_high, tasks, max_drop, min_gain, power_note)
    if not incomplete:
        return result
    if result.verdict == "PASS":
        reason = (
            f"{result.reason}, but only on the tasks both runs scored: {incomplete}; "
            "rerun them (harness eval resumes unscored episodes) before trusting a PASS"
        )
        return result.model_copy(update={"verdict": "WARN", "reason": reason})
    return result.model_copy(
        update={"reason": f"{result.reason}; left out, unscored on a side: {incomplete}"}
    )


def _verdict(
    diff: float,
    se: float,
    ci_low: float,
    ci_high: float,
    tasks: int,
    max_drop: float | None,
    min_gain: float | None,
    power_note: str,
) -> GateResult:
    if (max_drop is None) == (min_gain is None):
        raise HarnessError("give one of --max-drop and --min-gain (in points, e.g. --max-drop 5)")
    rule: Literal["max_drop", "min_gain"] = "max_drop" if max_drop is not None else "min_gain"
    x = max_drop if max_drop is not None else min_gain
    assert x is not None
    line = -x if rule == "max_drop" else x
    flag = f"--{rule.replace('_', '-')} {100 * x:g}"
    found = bounds(diff, se, ci_low, ci_high, tasks)
    if found is None:
        return GateResult(
            rule=rule,
            threshold=x,
            verdict="WARN",
            low=None,
            high=None,
            reason=f"{tasks} task(s) give no confidence interval, so {flag} cannot be decided; add tasks",
        )
    low, high = found
    ci = f"95% CI {100 * low:+.1f} to {100 * high:+.1f}" + (" (no spread: exact bound)" if se == 0 else "")
    if low > line:
        verdict: Verdict = "PASS"
        reason = (
            f"B is non-inferior: a drop of {100 * x:g} points or more is ruled out ({ci}, above {100 * line:+g}; {flag})"
            if rule == "max_drop"
            else f"B is better by more than {100 * x:g} points ({ci}, above {100 * line:+g}; {flag})"
        )
    elif high < line:
        verdict = "BLOCK"
        reason = (
            f"B drops by more than {100 * x:g} points ({ci}, all below {100 * line:+g}; {flag})"
            if rule == "max_drop"
            else f"B is not better by {100 * x:g} points ({ci}, all below {100 * line:+g}; {flag})"
        )
    else:
        verdict = "WARN"
        reason = f"the data cannot tell: the {ci} straddles {100 * line:+g} ({flag})" + (
            f"; {power_note}" if power_note else ""
        )
    return GateResult(rule=rule, threshold=x, verdict=verdict, low=low, high=high, reason=reason)
