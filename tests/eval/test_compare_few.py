"""`dsdr-eval report`'s paired comparison at few problems (dsdr_eval/reporting/compare.py).

A benchmark with fewer than FEW_PROBLEMS problems gets the paired t interval, not the percentile
bootstrap: checked against scipy's t test, and its coverage by simulation under a null where both runs
are the same process (docs/ablation_study.md "Analysis", issue 35).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ttest_1samp, ttest_ind

from dsdr_eval.reporting import compare


def test_paired_t_matches_scipy():
    rng = np.random.default_rng(0)
    d = rng.normal(0.1, 0.4, 8)
    delta, lo, hi, p = compare.paired_t({"b": d})
    ref = ttest_1samp(d, 0.0)
    ci = ref.confidence_interval(0.95)
    assert delta == pytest.approx(d.mean()) and p == pytest.approx(ref.pvalue, rel=1e-9)
    assert (lo, hi) == pytest.approx((ci.low, ci.high), rel=1e-9)
    # two strata: the mean of the two means; its variance and Welch-Satterthwaite df are those of Welch's
    # test of (x1 - (-x2)) / 2... written here as Welch's two-sample t of x1 against -x2 scaled by 1/2
    x1, x2 = rng.normal(0.2, 0.3, 6), rng.normal(0.0, 0.6, 11)
    delta, lo, hi, p = compare.paired_t({"a": x1, "b": x2})
    ref = ttest_ind(x1, -x2, equal_var=False)  # mean(x1) - mean(-x2) = 2 delta, same t statistic and df
    ci = ref.confidence_interval(0.95)
    assert delta == pytest.approx((x1.mean() + x2.mean()) / 2) and p == pytest.approx(ref.pvalue, rel=1e-9)
    assert (lo, hi) == pytest.approx((ci.low / 2, ci.high / 2), rel=1e-9)
    assert compare.paired_t([np.zeros(5)]) == (0.0, 0.0, 0.0, 1.0)


def _null_rate(interval, problems: int, reps: int, seed: int) -> float:
    """Share of null comparisons (both runs the same process: per-problem difficulty shared, 0/1 outcomes
    of 16 rollouts each drawn independently per run) whose 95 % interval excludes 0."""
    rng = np.random.default_rng(seed)
    false = 0
    for _ in range(reps):
        p = 1 / (1 + np.exp(-rng.normal(0, 1.5, problems)))
        a, b = rng.binomial(16, p) / 16, rng.binomial(16, p) / 16
        lo, hi = interval(b - a)[1:3]
        false += int(lo > 0 or hi < 0)
    return false / reps


def test_few_problem_interval_keeps_its_coverage_where_the_bootstrap_does_not():
    reps, problems = 1000, 8
    tol = 2 * (0.05 * 0.95 / reps) ** 0.5

    def used(d):  # what compare_runs uses for one benchmark of `problems` problems
        return compare.comparison_interval({"b": d}, 500, 0)[0]
    assert compare.comparison_interval({"b": np.arange(8.0)}, 500, 0)[1] == "t"
    assert compare.comparison_interval({"b": np.arange(40.0)}, 500, 0)[1] == "bootstrap"
    assert _null_rate(used, problems, reps, 1) <= 0.05 + tol
    assert _null_rate(lambda d: compare.paired_bootstrap({"b": d}, bootstrap=500, seed=0), problems, reps, 1) >= 0.07
