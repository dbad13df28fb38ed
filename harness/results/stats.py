"""Error bars and significance tests for agent evals: pure functions over per-task scores.

Tasks, not episodes, are the unit of sampling: the seeds of one task share its difficulty, so
episodes of one task are correlated and counting them as independent would make error bars too
narrow. Suites are small (tens of tasks), so intervals use Student's t rather than the normal
distribution, and comparisons use exact tests where they can be enumerated.
"""

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict
from scipy import stats

__all__ = [
    "Estimate",
    "PairedDifference",
    "clustered_mean",
    "mcnemar_exact_p",
    "paired_difference",
    "pass_at_k",
    "pass_hat_k",
    "sign_flip_p_value",
]

_MAX_EXACT_SUMS: Final = 1_000_000
_MC_SAMPLES: Final = 200_000
_MC_SEED: Final = 20240611
_MC_CHUNK_VALUES: Final = 2_000_000
_MAX_DENOMINATOR: Final = 10_000
_LATTICE_TOL: Final = 1e-10
# Float sums are in units of the largest |d|; rounding in m additions stays far below this.
_TIE: Final = 1e-9
_ZERO: Final = 1e-12


class Estimate(BaseModel):
    """A mean with its clustered standard error and t confidence interval (a record: reports embed it)."""

    model_config = ConfigDict(frozen=True)

    mean: float
    se: float
    ci_low: float
    ci_high: float
    n: int
    clusters: int


@dataclass(frozen=True)
class PairedDifference:
    """Mean of b - a over paired tasks, its t interval, and an exact (or Monte Carlo) p-value."""

    mean: float
    se: float
    ci_low: float
    ci_high: float
    n: int
    p_value: float
    test: str


def _scores(values: Sequence[float], name: str) -> npt.NDArray[np.float64]:
    """As a float array, refusing NaN and infinities, which would silently poison every statistic."""
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite numbers")
    return array


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")


def _t_interval(mean: float, se: float, df: int, confidence: float) -> tuple[float, float]:
    """Two-sided Student's t interval; nan when there is no standard error to scale."""
    if df < 1 or not np.isfinite(se):
        return float("nan"), float("nan")
    half = float(stats.t.ppf(0.5 + confidence / 2.0, df)) * se
    return mean - half, mean + half


def clustered_mean(
    scores: Sequence[float], clusters: Sequence[Hashable], confidence: float = 0.95
) -> Estimate:
    """Mean score with the standard error clustered by task, as in Miller (2024).

    Evan Miller, "Adding Error Bars to Evals: A Statistical Approach to Language Model
    Evaluations" (arXiv:2411.00640), section on clustered standard errors. The form implemented is
    the paper's main-text one:

        SE_clustered = sqrt(SE_CLT^2 + (1/n^2) * sum_c sum_i sum_{j != i} (s_ic - mean)(s_jc - mean))

    with SE_CLT^2 = var(s, ddof=1) / n, and without the C/(C-1) finite-cluster factor that Inspect
    AI adds to its variant. The double sum over j != i is computed as (sum_i r_ic)^2 - sum_i r_ic^2
    per cluster, which allows clusters of unequal size. With one observation per cluster the cross
    terms vanish and this is the plain CLT standard error.

    The interval uses Student's t with clusters - 1 degrees of freedom: the number of tasks, not of
    episodes, is what limits how well the standard error itself is known, and it is small here.
    With a single cluster nothing about between-task spread can be estimated, so se and the
    interval are nan.
    """
    _check_confidence(confidence)
    s = _scores(scores, "scores")
    if s.size == 0:
        raise ValueError("no scores to average")
    if len(clusters) != s.size:
        raise ValueError(f"{s.size} scores but {len(clusters)} cluster labels")
    index: dict[Hashable, int] = {}
    labels = np.fromiter((index.setdefault(c, len(index)) for c in clusters), dtype=np.intp, count=s.size)
    n, n_clusters = int(s.size), len(index)
    mean = float(s.mean())
    if n_clusters < 2:
        nan = float("nan")
        return Estimate(mean=mean, se=nan, ci_low=nan, ci_high=nan, n=n, clusters=n_clusters)
    residuals = s - mean
    cluster_sums = np.bincount(labels, weights=residuals, minlength=n_clusters)
    cross = float(np.sum(cluster_sums**2) - np.sum(residuals**2))
    variance = float(np.var(s, ddof=1)) / n + cross / n**2
    # Never negative in exact arithmetic; the clamp only absorbs rounding when all scores agree.
    se = float(np.sqrt(max(variance, 0.0)))
    low, high = _t_interval(mean, se, n_clusters - 1, confidence)
    return Estimate(mean=mean, se=se, ci_low=low, ci_high=high, n=n, clusters=n_clusters)


def mcnemar_exact_p(b01: int, b10: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts.

    Only tasks that one model solves and the other does not carry information about which model is
    better; under the null each such task is a fair coin, so the test is an exact binomial test
    with p = 0.5 on the discordant pairs. The exact test is used because discordant counts in small
    suites are far too few for the chi-squared approximation.
    """
    if b01 < 0 or b10 < 0:
        raise ValueError(f"discordant counts must be non-negative, got {b01} and {b10}")
    discordant = b01 + b10
    if discordant == 0:
        return 1.0
    return min(1.0, 2.0 * float(stats.binom.cdf(min(b01, b10), discordant, 0.5)))


def _lattice(d: npt.NDArray[np.float64]) -> npt.NDArray[np.int64] | None:
    """d as whole multiples of one 1/L when every value is a fraction with a small denominator.

    Scores averaged over S seeds are multiples of 1/S, and differences of two such averages are
    multiples of 1/lcm(S_a, S_b). On that lattice every sum is an exact integer, so one sum reached
    along different orders is one key and ties need no float tolerance.
    """
    denominator = 1
    for x in np.unique(np.abs(d)):
        fraction = Fraction(float(x)).limit_denominator(_MAX_DENOMINATOR)
        if abs(float(fraction) - x) > _LATTICE_TOL * max(1.0, float(x)):
            return None
        denominator = math.lcm(denominator, fraction.denominator)
        if denominator > _MAX_DENOMINATOR:
            return None
    return np.rint(d * denominator).astype(np.int64)


def _exact_sign_flip(values: npt.NDArray[np.int64] | npt.NDArray[np.float64], tie: float) -> float | None:
    """Exact two-sided p over all 2^m sign flips, or None when there are too many distinct sums.

    Dynamic programming over the achievable sums and the probability of each: on a 1/S lattice
    the number of distinct sums grows linearly in the number of tasks instead of doubling.
    """
    sums = np.zeros(1, dtype=values.dtype)
    probabilities = np.ones(1)
    for x in values:
        sums, where = np.unique(np.concatenate([sums + x, sums - x]), return_inverse=True)
        if sums.size > _MAX_EXACT_SUMS:
            return None
        probabilities = np.bincount(where, weights=np.concatenate([probabilities, probabilities]) / 2.0)
    observed = abs(values.sum())
    return min(1.0, float(probabilities[np.abs(sums) >= observed - tie].sum()))


def _monte_carlo_sign_flip(unit: npt.NDArray[np.float64]) -> float:
    """Monte Carlo two-sided p from random sign flips, with a fixed seed so reports are reproducible.

    Uses (hits + 1) / (samples + 1), counting the observed assignment as one draw, so the estimate
    is never an impossible p = 0 (Phipson and Smyth 2010).
    """
    rng = np.random.default_rng(_MC_SEED)
    observed = abs(float(unit.sum()))
    hits = 0
    chunk = max(1, _MC_CHUNK_VALUES // unit.size)
    for start in range(0, _MC_SAMPLES, chunk):
        size = min(chunk, _MC_SAMPLES - start)
        signs = rng.integers(0, 2, size=(size, unit.size)) * 2.0 - 1.0
        hits += int(np.count_nonzero(np.abs(signs @ unit) >= observed - _TIE))
    return (hits + 1) / (_MC_SAMPLES + 1)


def sign_flip_p_value(d: Sequence[float]) -> tuple[float, str]:
    """Two-sided paired sign-flip permutation test of mean(d) = 0, with the test's description.

    Under the null that the two models are exchangeable on every task, each task's difference is
    as likely to have either sign, so the p-value is the fraction of the 2^m sign assignments of
    the m nonzero differences whose |sum| is at least the observed |sum|. This makes no normality
    assumption, which matters for bounded, lumpy rewards on a few dozen tasks. Zero differences
    are dropped: flipping them changes nothing.

    When the differences are multiples of some 1/L (L <= 10,000; seed-averaged rewards are) sums
    are kept as exact integers, so 1/3 + 1/3 + 1/3 ties with 1. Otherwise sums are floats in units
    of the largest |d|, and sums within 1e-9 of the observed one count as ties.

    The null distribution is enumerated exactly when it has at most ~1e6 distinct sums; beyond
    that (many tasks with irregular real-valued differences) it falls back to 200,000 random sign
    flips and says so in the description.
    """
    return _sign_flip(_scores(d, "differences"))


def _sign_flip(diffs: npt.NDArray[np.float64]) -> tuple[float, str]:
    diffs = diffs[np.abs(diffs) > _ZERO]
    if diffs.size == 0:
        return 1.0, "sign-flip permutation (exact)"
    # The p-value is scale-free, so float sums work in units of the largest |d| and one tolerance serves.
    unit = diffs / np.max(np.abs(diffs))
    steps = _lattice(diffs)
    exact = _exact_sign_flip(steps, 0.0) if steps is not None else _exact_sign_flip(unit, _TIE)
    if exact is not None:
        return exact, "sign-flip permutation (exact)"
    return _monte_carlo_sign_flip(unit), f"sign-flip permutation (Monte Carlo, {_MC_SAMPLES} samples)"


def _is_binary(values: npt.NDArray[np.float64]) -> bool:
    return bool(np.all((values == 0.0) | (values == 1.0)))


def paired_difference(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95, binary: bool | None = None
) -> PairedDifference:
    """Compare models A and B task by task: mean of b - a, its t interval, and a p-value.

    a[i] and b[i] are the same task's score (averaged over seeds) under each model. Pairing by task
    removes the between-task variance that both models share, which is most of the variance in
    an agent eval; this is the paired analysis Miller (2024) recommends. se = std(d, ddof=1)/sqrt(n)
    and the interval uses Student's t with n - 1 degrees of freedom because n (tasks) is small.

    The p-value is exact McNemar when every score is 0 or 1 (one seed of a pass/fail task) and
    the exact sign-flip permutation test otherwise. binary=None picks by looking at the scores;
    True insists on McNemar (and refuses non-binary scores); False always uses the sign-flip test.
    """
    _check_confidence(confidence)
    x, y = _scores(a, "a"), _scores(b, "b")
    if x.size != y.size:
        raise ValueError(f"a has {x.size} tasks but b has {y.size}; pair them by task first")
    if x.size == 0:
        raise ValueError("no paired tasks to compare")
    d = y - x
    n = int(d.size)
    mean = float(d.mean())
    se = float(np.std(d, ddof=1) / np.sqrt(n)) if n >= 2 else float("nan")
    low, high = _t_interval(mean, se, n - 1, confidence)
    is_binary = _is_binary(x) and _is_binary(y)
    if binary and not is_binary:
        raise ValueError("binary=True needs every score to be 0 or 1")
    if binary is None:
        binary = is_binary
    if binary:
        b01 = int(np.count_nonzero((x == 0.0) & (y == 1.0)))
        b10 = int(np.count_nonzero((x == 1.0) & (y == 0.0)))
        p, test = mcnemar_exact_p(b01, b10), "McNemar exact"
    else:
        p, test = _sign_flip(d)
    return PairedDifference(mean=mean, se=se, ci_low=low, ci_high=high, n=n, p_value=p, test=test)


def _check_counts(n: int, c: int, k: int) -> None:
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k} with n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed: 1 - C(n-c, k) / C(n, k).

    Chen et al. (2021), "Evaluating Large Language Models Trained on Code". Estimating from n >= k
    samples rather than drawing exactly k is unbiased and lower-variance. Computed as the product
    1 - prod_{i=n-c+1}^{n} (1 - k/i), because the binomial coefficients overflow floats for the
    sample counts used in practice.
    """
    _check_counts(n, c, k)
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k from n samples of which c passed: C(c, k) / C(n, k), the chance all k tries pass.

    Yao et al. (2024), tau-bench. pass@k rewards a model that succeeds once in k tries; pass^k
    measures reliability, which is what matters when an agent runs unattended. Computed as the
    product prod_{i<k} (c-i)/(n-i) so large n does not overflow.
    """
    _check_counts(n, c, k)
    if c < k:
        return 0.0
    i = np.arange(k, dtype=np.float64)
    return float(np.prod((c - i) / (n - i)))
