"""harness.results.stats against hand-computed values and scipy's own implementations."""

import math

import numpy as np
import pytest
from scipy import stats

from harness.results.stats import (
    clustered_mean,
    mcnemar_exact_p,
    paired_difference,
    pass_at_k,
    pass_hat_k,
    sign_flip_p_value,
)

# --- clustered_mean -----------------------------------------------------------------------------


def test_clustered_se_by_hand_with_unequal_clusters() -> None:
    # Clusters of sizes 3, 1, 2. n = 6, mean = 4/6 = 2/3.
    # Residuals r = s - 2/3:  a: 1/3, 1/3, -2/3   b: 1/3   c: -2/3, 1/3
    # sum r^2 = 4 * 1/9 + 2 * 4/9 = 12/9, so var(ddof=1) = (12/9) / 5 = 4/15 and
    # SE_CLT^2 = (4/15) / 6 = 2/45.
    # Cross terms sum_{i != j} r_i r_j within each cluster:
    #   a: 2*(1/3)(1/3) + 4*(1/3)(-2/3) = 2/9 - 8/9 = -6/9
    #   b: none (one observation)
    #   c: 2*(-2/3)(1/3) = -4/9
    # total -10/9, divided by n^2 = 36 gives -10/324 = -5/162.
    # SE^2 = 2/45 - 5/162 = 36/810 - 25/810 = 11/810.
    scores = [1, 1, 0, 1, 0, 1]
    labels = ["a", "a", "a", "b", "c", "c"]
    est = clustered_mean(scores, labels)
    assert est.mean == pytest.approx(2 / 3, abs=1e-12)
    assert est.se == pytest.approx(math.sqrt(11 / 810), abs=1e-12)
    assert (est.n, est.clusters) == (6, 3)


def test_singleton_clusters_give_the_plain_clt_standard_error() -> None:
    scores = [0.2, 0.9, 0.4, 1.0, 0.0, 0.7, 0.55]
    est = clustered_mean(scores, list(range(len(scores))))
    assert est.se == pytest.approx(float(stats.sem(scores)), abs=1e-12)
    assert est.clusters == len(scores)


def test_positively_correlated_clusters_widen_the_error_bar() -> None:
    scores = [1, 1, 1, 0, 0, 0, 1, 1, 0, 0]
    labels = ["a", "a", "a", "b", "b", "b", "c", "c", "d", "d"]
    est = clustered_mean(scores, labels)
    assert est.se > 1.2 * float(stats.sem(scores))


def test_interval_is_student_t_with_clusters_minus_one_df() -> None:
    scores = [1, 0.5, 0, 1, 1, 0.25, 0, 0.75]
    labels = [1, 1, 2, 2, 3, 3, 4, 5]
    est = clustered_mean(scores, labels, confidence=0.9)
    low, high = stats.t.interval(0.9, df=4, loc=est.mean, scale=est.se)
    assert est.ci_low == pytest.approx(low, abs=1e-12)
    assert est.ci_high == pytest.approx(high, abs=1e-12)


def test_clustered_mean_rejects_empty_and_mismatched_input() -> None:
    with pytest.raises(ValueError):
        clustered_mean([], [])
    with pytest.raises(ValueError):
        clustered_mean([1.0, 0.0], ["a"])


def test_one_cluster_has_no_standard_error() -> None:
    est = clustered_mean([1, 0, 1], ["t", "t", "t"])
    assert est.mean == pytest.approx(2 / 3)
    assert math.isnan(est.se) and math.isnan(est.ci_low) and math.isnan(est.ci_high)
    assert est.clusters == 1


# --- paired_difference ----------------------------------------------------------------------------

A_FLOAT = [0.2, 0.5, 0.9, 0.4, 0.6, 0.1, 0.7, 0.3]
B_FLOAT = [0.4, 0.5, 0.8, 0.9, 0.9, 0.3, 0.6, 0.6]
# Three seeds per task: multiples of 1/3, with ties and a zero difference.
A_THIRDS = [0, 1 / 3, 2 / 3, 1, 1 / 3, 0, 2 / 3, 1, 1 / 3, 0, 1, 2 / 3]
B_THIRDS = [1 / 3, 1 / 3, 1, 2 / 3, 1, 1 / 3, 1, 1, 2 / 3, 2 / 3, 1, 1]
_rng = np.random.default_rng(7)
A_RANDOM = list(_rng.uniform(size=10))
B_RANDOM = list(_rng.uniform(size=10))
FIXTURES = [(A_FLOAT, B_FLOAT), (A_THIRDS, B_THIRDS), (A_RANDOM, B_RANDOM)]


@pytest.mark.parametrize(("a", "b"), FIXTURES)
def test_se_and_interval_match_ttest_rel(a: list[float], b: list[float]) -> None:
    result = paired_difference(a, b)
    reference = stats.ttest_rel(b, a)
    ci = reference.confidence_interval(confidence_level=0.95)
    assert result.mean == pytest.approx(float(np.mean(np.subtract(b, a))), abs=1e-12)
    # ttest_rel's statistic is mean(d) / se.
    assert result.se == pytest.approx(result.mean / float(reference.statistic), abs=1e-12)
    assert result.ci_low == pytest.approx(float(ci.low), abs=1e-12)
    assert result.ci_high == pytest.approx(float(ci.high), abs=1e-12)
    assert result.n == len(a)


@pytest.mark.parametrize(("a", "b"), FIXTURES)
def test_sign_flip_p_matches_scipy_exact_permutation_test(a: list[float], b: list[float]) -> None:
    reference = stats.permutation_test(
        (b, a),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        n_resamples=np.inf,
        alternative="two-sided",
        vectorized=True,
    )
    result = paired_difference(a, b)
    assert result.test == "sign-flip permutation (exact)"
    assert result.p_value == pytest.approx(float(reference.pvalue), abs=1e-12)


def test_sign_flip_by_hand() -> None:
    # d = [1, 0.5, -0.5] (the zero is dropped); observed sum 1. The 8 sign patterns:
    #   + + +  1 + 0.5 - 0.5 =  1   counts
    #   + + -  1 + 0.5 + 0.5 =  2   counts
    #   + - +  1 - 0.5 - 0.5 =  0
    #   + - -  1 - 0.5 + 0.5 =  1   counts
    #   - + +       -1             counts
    #   - + -        0
    #   - - +       -2             counts
    #   - - -       -1             counts
    # 6 of 8 have |sum| >= 1.
    assert sign_flip_p_value([1, 0.5, -0.5, 0]) == (0.75, "sign-flip permutation (exact)")
    # Same thing through paired_difference, from scores that are not all 0/1.
    result = paired_difference([0, 0.25, 0.75, 0.5], [1, 0.75, 0.25, 0.5])
    assert result.p_value == pytest.approx(0.75, abs=1e-12)


def test_sign_flip_keeps_float_ties() -> None:
    # 1/3 + 1/3 + 1/3 in floats need not equal 1 exactly; it must still tie with it.
    # d = [1/3, 1/3, 1/3, -1]: observed sum 0, so every pattern has |sum| >= 0.
    assert sign_flip_p_value([1 / 3, 1 / 3, 1 / 3, -1])[0] == pytest.approx(1.0)
    # d = [0.3, -0.1, -0.2]: observed 0.3 - 0.1 - 0.2 is float noise around 0; all patterns count.
    assert sign_flip_p_value([0.3, -0.1, -0.2])[0] == pytest.approx(1.0)


def test_mcnemar_by_hand_and_against_binomtest() -> None:
    assert mcnemar_exact_p(0, 6) == pytest.approx(2 / 64, abs=1e-15)
    assert mcnemar_exact_p(3, 3) == 1.0
    assert mcnemar_exact_p(0, 0) == 1.0
    for b01 in range(0, 12):
        for b10 in range(0, 12):
            if b01 + b10 == 0:
                continue
            reference = stats.binomtest(min(b01, b10), b01 + b10, 0.5, alternative="two-sided").pvalue
            assert mcnemar_exact_p(b01, b10) == pytest.approx(float(reference), abs=1e-12)
    with pytest.raises(ValueError):
        mcnemar_exact_p(-1, 2)


def test_binary_scores_take_the_mcnemar_path() -> None:
    a = [1, 1, 0, 0, 1, 0, 1, 1, 0]
    b = [0, 1, 1, 1, 1, 1, 1, 1, 0]
    # b01 (A fails, B passes) = 3, b10 = 1: p = 2 * P(X <= 1; 4, 0.5) = 2 * 5/16.
    result = paired_difference(a, b)
    assert result.test == "McNemar exact"
    assert result.p_value == pytest.approx(10 / 16, abs=1e-12)
    # On +-1 differences the sign-flip test is the same exact binomial test.
    forced = paired_difference(a, b, binary=False)
    assert forced.test == "sign-flip permutation (exact)"
    assert forced.p_value == pytest.approx(result.p_value, abs=1e-12)
    with pytest.raises(ValueError):
        paired_difference([0.5, 1], [1, 0], binary=True)


def test_identical_models_give_p_one_and_zero_difference() -> None:
    scores = [0.25, 0.5, 1.0, 0.0, 0.75]
    result = paired_difference(scores, scores)
    assert result.mean == 0.0 and result.se == 0.0
    assert result.p_value == 1.0
    assert (result.ci_low, result.ci_high) == (0.0, 0.0)


def test_paired_difference_input_errors_and_single_task() -> None:
    with pytest.raises(ValueError):
        paired_difference([], [])
    with pytest.raises(ValueError):
        paired_difference([0.1, 0.2], [0.3])
    single = paired_difference([0.25], [0.75])
    assert single.mean == 0.5 and single.n == 1
    assert math.isnan(single.se) and math.isnan(single.ci_low) and math.isnan(single.ci_high)


def _grid_sign_flip_p(steps: np.ndarray) -> float:
    """Exact two-sided sign-flip p for integer differences, by multiplying out prod (x^-q + x^q) / 2."""
    offset = int(np.abs(steps).sum())
    distribution = np.zeros(2 * offset + 1)
    distribution[offset] = 1.0
    for q in np.abs(steps):
        distribution = (np.roll(distribution, q) + np.roll(distribution, -q)) / 2
    sums = np.arange(-offset, offset + 1)
    return float(distribution[np.abs(sums) >= abs(int(steps.sum()))].sum())


@pytest.mark.parametrize(("seeds_a", "seeds_b"), [(3, 3), (5, 5), (3, 4)])
def test_many_tasks_on_a_seed_grid_stay_exact(seeds_a: int, seeds_b: int) -> None:
    # 300 tasks with rewards averaged over a few seeds: the exact test must stay exact and cheap,
    # and ties such as 1/3 + 1/3 + 1/3 == 1 must survive 300 float additions.
    rng = np.random.default_rng(seeds_a * 10 + seeds_b)
    a_passes = rng.integers(0, seeds_a + 1, size=300)
    b_passes = rng.integers(0, seeds_b + 1, size=300)
    result = paired_difference(list(a_passes / seeds_a), list(b_passes / seeds_b))
    assert result.test == "sign-flip permutation (exact)"
    lcm = math.lcm(seeds_a, seeds_b)
    expected = _grid_sign_flip_p(b_passes * (lcm // seeds_b) - a_passes * (lcm // seeds_a))
    assert 1e-6 < expected < 0.99  # neither trivially 1 nor vanishing
    assert result.p_value == pytest.approx(expected, rel=1e-9)


def test_irregular_differences_fall_back_to_monte_carlo() -> None:
    # 40 distinct irrational differences: 2^40 distinct sums, far past the exact limit.
    d = np.array([math.sin(1.7 * i + 0.3) + 0.12 for i in range(40)])
    a = np.full(40, 0.5)
    result = paired_difference(list(a), list(a + d))
    assert "Monte Carlo" in result.test
    normal = 2 * stats.norm.sf(abs(d.sum()) / math.sqrt(np.sum(d**2)))
    assert 0.1 < normal < 0.5  # a p-value where both estimates are informative
    assert result.p_value == pytest.approx(normal, abs=0.02)


# --- pass@k and pass^k ----------------------------------------------------------------------------


def test_pass_at_k_and_pass_hat_k_by_hand() -> None:
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4, abs=1e-15)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10, abs=1e-15)  # 1 - C(3,2)/C(5,2)
    assert pass_hat_k(5, 2, 2) == pytest.approx(1 / 10, abs=1e-15)  # C(2,2)/C(5,2)
    assert pass_hat_k(5, 2, 1) == pytest.approx(0.4, abs=1e-15)


def test_pass_at_k_and_pass_hat_k_match_binomial_formulas_on_a_grid() -> None:
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                at_k = 1 - math.comb(n - c, k) / math.comb(n, k)
                hat_k = math.comb(c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(at_k, abs=1e-12), (n, c, k)
                assert pass_hat_k(n, c, k) == pytest.approx(hat_k, abs=1e-12), (n, c, k)


def test_pass_k_edges_and_errors() -> None:
    assert pass_at_k(10, 0, 3) == 0.0 and pass_hat_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 10, 3) == 1.0 and pass_hat_k(10, 10, 3) == pytest.approx(1.0, abs=1e-15)
    # Large n: C(2000, 1000) overflows a float; with one pass, pass@k is exactly k/n.
    assert pass_at_k(2000, 1, 1000) == pytest.approx(0.5, abs=1e-12)
    assert pass_hat_k(2000, 1999, 1000) == pytest.approx(0.5, abs=1e-12)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError):
        pass_hat_k(3, 1, 4)
