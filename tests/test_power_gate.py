"""Minimum detectable effect and the regression gate, against hand-computed values and simulation.

Simulations use the decision the harness reports: the paired 95% t interval excludes 0.
"""

import math

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from scipy import stats

from harness.errors import HarnessError
from harness.results.gate import gate, threshold
from harness.results.power import (
    detectable_difference,
    paired_power,
    paired_spread,
    run_precision,
    run_spread,
)

SIMS = 4000


def detected(d: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    """Per simulated run (rows), whether the paired 95% t interval of mean(d) excludes 0."""
    n = d.shape[1]
    se = d.std(axis=1, ddof=1) / math.sqrt(n)
    half = stats.t.ppf(0.975, n - 1) * se
    return np.abs(d.mean(axis=1)) > half


def effect_at_80(power_of: "callable[[float], float]", high: float) -> float:  # type: ignore[valid-type]
    """The effect whose simulated power is 80% (bisection; power_of uses common random numbers)."""
    low = 0.0
    for _ in range(30):
        mid = (low + high) / 2
        if power_of(mid) < 0.8:
            low = mid
        else:
            high = mid
    return (low + high) / 2


# --- detectable_difference -------------------------------------------------------------------


def test_mde_by_hand() -> None:
    # 20 tasks, sd 1: noncentral t with 19 df; (t_.975,19 + t_.80,19) / sqrt(20) = (2.0930 + 0.8610) / 4.4721
    # = 0.6605, which the exact noncentral-t root matches to 3 decimals at this many df.
    assert detectable_difference(1.0, 20) == pytest.approx(0.6605, abs=2e-3)
    # The large-n limit is the normal one: (1.95996 + 0.84162) / sqrt(n).
    assert detectable_difference(1.0, 10_000) == pytest.approx(2.80158 / 100, rel=2e-3)
    # It scales with sd, and shrinks as 1/sqrt(n).
    assert detectable_difference(0.3, 40) == pytest.approx(0.3 * detectable_difference(1.0, 40))
    assert math.isnan(detectable_difference(1.0, 1)) and math.isnan(detectable_difference(0.0, 20))
    # 2-4 tasks (1-3 df): finite though scipy's noncentral t has nan far tails there (80% checked by
    # simulating 200,000 runs each: 0.799, 0.800, 0.802).
    assert [round(detectable_difference(1.0, n), 2) for n in (2, 3, 4)] == [11.55, 3.26, 2.13]


@pytest.mark.parametrize("n", [5, 20, 60])
def test_mde_is_the_simulated_80_percent_power_effect_for_normal_differences(n: int) -> None:
    rng = np.random.default_rng(n)
    noise = rng.standard_normal((SIMS, n))
    simulated = effect_at_80(lambda delta: float(detected(delta + noise).mean()), high=5.0)
    assert detectable_difference(1.0, n) == pytest.approx(simulated, rel=0.10)


def binary_runs(
    rng: np.random.Generator, sims: int, tasks: int, seeds: int
) -> "callable[[float], tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]":  # type: ignore[valid-type]
    """Pass/fail episodes: task difficulty p ~ Beta(0.7, 0.7); the fine-tune raises each task's rate
    to p + g(1 - p), a mean effect of g/2. Fixed uniforms make power monotone in the effect."""
    p = rng.beta(0.7, 0.7, size=(sims, tasks, 1))
    ua, ub = rng.random((sims, tasks, seeds)), rng.random((sims, tasks, seeds))

    def draw(effect: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        q = p + 2 * effect * (1 - p)
        return (ua < p).astype(float), (ub < q).astype(float)

    return draw


def frames(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One simulated run's episodes as the (task_id, score) frames the harness aggregates."""
    tasks, seeds = a.shape
    ids = np.repeat([f"t{i}" for i in range(tasks)], seeds)
    return (
        pd.DataFrame({"task_id": ids, "score": a.ravel()}),
        pd.DataFrame({"task_id": ids, "score": b.ravel()}),
    )


def mean_mde(draw, effect: float, runs: int, seeds: int | None = None) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """The harness's MDE (or, with seeds, its projection to that many seeds), averaged over runs."""
    a, b = draw(effect)
    lows, highs = [], []
    for i in range(runs):
        power = paired_power(paired_spread(*frames(a[i], b[i])))
        if seeds is None:
            assert power.mde is not None
            lows.append(power.mde)
            highs.append(power.mde)
        else:
            option = next(o for o in power.options if o.seeds == seeds and o.tasks == power.tasks)
            lows.append(option.low)
            highs.append(option.high)
    return float(np.mean(lows)), float(np.mean(highs))


@pytest.mark.slow
@pytest.mark.parametrize(("tasks", "seeds"), [(20, 1), (30, 3)])
def test_mde_matches_simulated_power_on_pass_fail_episodes(tasks: int, seeds: int) -> None:
    draw = binary_runs(np.random.default_rng(7), SIMS, tasks, seeds)

    def power(effect: float) -> float:
        a, b = draw(effect)
        return float(detected(b.mean(axis=2) - a.mean(axis=2)).mean())

    simulated = effect_at_80(power, high=0.5)
    mde, _ = mean_mde(draw, simulated, runs=400)
    assert mde == pytest.approx(simulated, rel=0.10)


@pytest.mark.slow
def test_projection_to_more_seeds_matches_simulation() -> None:
    """From 3-seed runs the harness predicts the MDE with 6 seeds; simulate 6-seed runs to check it."""
    tasks = 30
    draw3 = binary_runs(np.random.default_rng(11), SIMS, tasks, 3)
    draw6 = binary_runs(np.random.default_rng(12), SIMS, tasks, 6)

    def power6(effect: float) -> float:
        a, b = draw6(effect)
        return float(detected(b.mean(axis=2) - a.mean(axis=2)).mean())

    simulated6 = effect_at_80(power6, high=0.5)
    low, high = mean_mde(draw3, simulated6, runs=400, seeds=6)
    assert low == high  # seeds > 1: the split is estimated, so one number
    assert low == pytest.approx(simulated6, rel=0.10)


@pytest.mark.slow
def test_one_seed_projection_is_a_range_holding_the_truth() -> None:
    tasks = 20
    draw1 = binary_runs(np.random.default_rng(21), SIMS, tasks, 1)
    draw3 = binary_runs(np.random.default_rng(22), SIMS, tasks, 3)

    def power3(effect: float) -> float:
        a, b = draw3(effect)
        return float(detected(b.mean(axis=2) - a.mean(axis=2)).mean())

    simulated3 = effect_at_80(power3, high=0.5)
    low, high = mean_mde(draw1, simulated3, runs=300, seeds=3)
    assert low < simulated3 < high


def test_power_sentence_by_hand() -> None:
    # d = b - a per task, 1 seed: [1, 0, -1, 1] x 5 -> var(ddof=1) of 20 values.
    a = pd.DataFrame({"task_id": [f"t{i}" for i in range(20)], "score": [0.0, 0.0, 1.0, 0.0] * 5})
    b = pd.DataFrame({"task_id": [f"t{i}" for i in range(20)], "score": [1.0, 0.0, 0.0, 1.0] * 5})
    d = np.array([1.0, 0.0, -1.0, 1.0] * 5)
    sd = float(np.std(d, ddof=1))
    power = paired_power(paired_spread(a, b))
    assert power.mde == pytest.approx(detectable_difference(sd, 20))
    three = power.options[0]
    assert (three.tasks, three.seeds) == (20, 3)
    assert three.low == pytest.approx(detectable_difference(sd / math.sqrt(3), 20))
    assert three.high == pytest.approx(power.mde)
    forty = power.options[1]
    assert (forty.tasks, forty.seeds) == (40, 1) and forty.low == pytest.approx(detectable_difference(sd, 40))
    text = power.sentence()
    assert text.startswith(
        f"with 20 tasks x 1 seed, differences under {100 * power.mde:.0f} points are not detectable"
    )
    assert f"3 seeds: {100 * three.low:.0f} to {100 * three.high:.0f} points" in text
    assert "one seed cannot tell seed noise from task difficulty" in text


def test_effects_past_the_range_are_said_in_words() -> None:
    a = pd.DataFrame({"task_id": ["t1", "t2", "t3"], "score": [0.0, 0.0, 0.0]})
    b = pd.DataFrame({"task_id": ["t1", "t2", "t3"], "score": [1.0, 0.0, 1.0]})
    power = paired_power(paired_spread(a, b))
    assert power.mde is not None and power.mde > 1  # 3 tasks: the t quantiles with 2 df are huge
    text = power.sentence()
    assert text.startswith(
        "with 3 tasks x 1 seed, no difference is reliably detectable (80% power needs over 100"
    )
    assert "3 seeds: " in text and "6 tasks x 1 seed: " in text and "188" not in text


def test_no_spread_says_what_an_exact_bound_allows() -> None:
    frame = pd.DataFrame({"task_id": [f"t{i}" for i in range(20)], "score": [0.0] * 20})
    power = paired_power(paired_spread(frame, frame))
    assert power.mde is None and power.options == []
    assert power.sentence() == (
        "with 20 tasks x 1 seed: every task's difference is the same, so there is no spread to estimate "
        "power from; a change on up to 17% of the tasks is not ruled out"
    )


def test_run_precision_projects_the_ci_half_width() -> None:
    # 30 tasks x 2 seeds: 10 tasks split 0/1 across seeds, 10 always solved, 10 never.
    rows = [
        (f"{kind}{i}", s)
        for kind, pair in (("t", (0.0, 1.0)), ("u", (1.0, 1.0)), ("v", (0.0, 0.0)))
        for i in range(10)
        for s in pair
    ]
    spread = run_spread(pd.DataFrame(rows, columns=["task_id", "score"]))
    # Task means 0.5, 1, 0 (x10 each): var(ddof=1) = (10 * 0.25 + 10 * 0.25) / 29 = 5/29.
    assert spread.total == pytest.approx(5 / 29)
    # Within-task sample variance: 0.5 on the split tasks, 0 elsewhere -> 1/6 per episode; at 2 seeds 1/12.
    assert (spread.noise, spread.noise_now) == pytest.approx((1 / 6, 1 / 12))
    se = 0.05
    p = run_precision(spread, se)
    assert p is not None and p.seeds_known and p.half_width == pytest.approx(stats.t.ppf(0.975, 29) * se)
    three = p.options[0]
    assert three.seeds == 3
    # between = 5/29 - 1/12; with 3 seeds: between + (1/6) / 3, relative to today's total.
    expected = stats.t.ppf(0.975, 29) * se * math.sqrt((5 / 29 - 1 / 12 + 1 / 18) / (5 / 29))
    assert three.low == three.high == pytest.approx(expected)
    assert p.sentence().startswith(f"2 seeds: +-{100 * p.half_width:.0f} points; with 3 seeds about +-")


def test_more_seeds_never_widen_the_projection() -> None:
    """Sample variances can claim more seed noise than the total holds; the projection is capped."""
    rows = [(f"t{i}", s) for i in range(10) for s in (0.0, 1.0)] + [
        (f"u{i}", 1.0) for i in range(10) for _ in (1, 2)
    ]
    spread = run_spread(pd.DataFrame(rows, columns=["task_id", "score"]))
    assert spread.noise_now is not None and spread.noise_now > spread.total
    assert spread.variance_at(3)[0] <= spread.total and spread.variance_at(2)[0] == pytest.approx(
        spread.total
    )


# --- the gate -------------------------------------------------------------------------------


def _gate(diff: float, low: float, high: float, tasks: int = 20, se: float = 0.05, **rule: float) -> str:
    return gate(diff=diff, se=se, ci_low=low, ci_high=high, tasks=tasks, **rule).verdict


@pytest.mark.parametrize(
    ("diff", "low", "high", "verdict", "code"),
    [
        (0.01, -0.03, 0.05, "PASS", 0),  # lower end above -5: non-inferior
        (-0.20, -0.30, -0.10, "BLOCK", 1),  # whole interval below -5: a drop over 5 established
        (-0.02, -0.12, 0.08, "WARN", 2),  # straddles -5
        (-0.05, -0.05, 0.0, "WARN", 2),  # touching is not above
    ],
)
def test_max_drop_verdicts_and_exit_codes(
    diff: float, low: float, high: float, verdict: str, code: int
) -> None:
    result = gate(diff=diff, se=0.05, ci_low=low, ci_high=high, tasks=20, max_drop=0.05)
    assert (result.verdict, result.exit_code) == (verdict, code)
    assert result.line().startswith(verdict)


def test_min_gain_verdicts() -> None:
    assert _gate(0.20, 0.12, 0.28, min_gain=0.10) == "PASS"
    assert _gate(0.02, -0.03, 0.07, min_gain=0.10) == "BLOCK"
    assert _gate(0.12, 0.05, 0.19, min_gain=0.10) == "WARN"


def test_gate_without_spread_uses_the_exact_unseen_change_bound() -> None:
    # 20 unchanged tasks: a change on up to 1 - 0.025^(1/20) = 16.8% of tasks is not ruled out.
    bound = 1 - 0.025 ** (1 / 20)
    assert bound == pytest.approx(0.1684, abs=1e-4)
    r = gate(diff=0.0, se=0.0, ci_low=0.0, ci_high=0.0, tasks=20, max_drop=0.20)
    assert r.verdict == "PASS" and r.low == pytest.approx(-bound)
    assert _gate(0.0, 0.0, 0.0, se=0.0, max_drop=0.10) == "WARN"
    # One task: no interval at all.
    r = gate(diff=1.0, se=float("nan"), ci_low=float("nan"), ci_high=float("nan"), tasks=1, max_drop=0.05)
    assert r.verdict == "WARN" and "add tasks" in r.reason


def test_gate_agrees_with_a_one_sided_t_test_on_data() -> None:
    """PASS exactly when the one-sided t-test of mean(d) <= -X rejects at 2.5% (what the CI end means)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        d = rng.normal(rng.uniform(-0.2, 0.1), 0.3, size=25)
        n, mean, se = d.size, float(d.mean()), float(d.std(ddof=1) / 5)
        half = stats.t.ppf(0.975, n - 1) * se
        result = gate(diff=mean, se=se, ci_low=mean - half, ci_high=mean + half, tasks=n, max_drop=0.05)
        p_noninferior = stats.ttest_1samp(d, -0.05, alternative="greater").pvalue
        assert (result.verdict == "PASS") == (p_noninferior < 0.025)


@pytest.mark.parametrize(
    ("value", "flag"), [(-1.0, "--max-drop"), (101.0, "--max-drop"), (float("nan"), "--min-gain")]
)
def test_bad_thresholds_are_one_line_errors(value: float, flag: str) -> None:
    with pytest.raises(HarnessError, match=rf"^{flag} .*: must be between 0 and 100 points"):
        threshold(value, flag)
    assert threshold(5, "--max-drop") == 0.05 and threshold(None, "--max-drop") is None


def test_gate_needs_exactly_one_rule() -> None:
    with pytest.raises(HarnessError, match="one of --max-drop and --min-gain"):
        gate(diff=0, se=0.1, ci_low=-0.1, ci_high=0.1, tasks=20)
