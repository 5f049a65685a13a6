"""pass@k against exact binomials, Avg@k / maj@k / pass1 definitions, bootstrap CIs, macro average."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from dsdr_eval.errors import DsdrError
from dsdr_eval.scoring.metrics import compute_metrics, majority_correct, pass_at_k


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_pass_at_k_matches_exact_comb():
    rng = random.Random(0)
    cases = [(n, c, k) for n in (1, 2, 3, 5, 8, 16, 17, 64) for c in range(n + 1) for k in (1, 2, 4, 8, 16, 32, 64) if k <= n]
    cases += [(n, rng.randint(0, n), rng.randint(1, n)) for n in (rng.randint(1, 300) for _ in range(300))]
    for n, c, k in cases:
        assert pass_at_k(n, c, k) == pytest.approx(float(exact_pass_at_k(n, c, k)), abs=1e-12), (n, c, k)


def test_pass_at_k_edges():
    assert pass_at_k(64, 0, 64) == 0.0
    assert pass_at_k(64, 1, 64) == 1.0  # n - c < k
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    for bad in ((4, 5, 1), (4, 2, 5), (4, 2, 0), (4, -1, 1)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_majority_vote_and_ties():
    assert majority_correct([0, 1, 1], [True, False, False]) is False
    assert majority_correct([1, 0, 0, 1], [False, True, True, False]) is False  # tie: class seen first (1)
    assert majority_correct([0, 1, 0, 1], [True, False, True, False]) is True
    assert majority_correct([None, None, 2], [False, False, True]) is True  # no-answer samples do not vote
    assert majority_correct([None, None], [False, False]) is False


def _rows(benchmark: str, correct_matrix: np.ndarray, classes: np.ndarray | None = None, phase: str = "sampling"):
    rows = []
    for p, row in enumerate(correct_matrix):
        for s, ok in enumerate(row):
            cls = int(classes[p, s]) if classes is not None else (0 if ok else 1)
            rows.append({"benchmark": benchmark, "problem_id": f"p{p}", "sample_idx": s, "phase": phase,
                         "gold": "1", "completion": "c",
                         "correct": bool(ok), "status": "correct" if ok else "incorrect", "answer_class": cls,
                         "n_completion_tokens": 100 + s, "finish_reason": "length" if s == 0 else "stop"})
    return rows


def test_compute_metrics_definitions():
    rng = np.random.default_rng(1)
    correct = rng.random((12, 64)) < np.linspace(0.05, 0.9, 12)[:, None]
    rows = _rows("bench", correct)
    rows += _rows("bench", correct[:, :1], phase="pass1")
    random.Random(0).shuffle(rows)  # order in the file must not matter: sample_idx does
    metrics = compute_metrics(rows, bootstrap=200, seed=3)
    entry = metrics["benchmarks"]["bench"]
    assert entry["n_problems"] == 12 and entry["n_samples_per_problem"] == 64
    c = correct.sum(axis=1)
    for k in (1, 2, 4, 8, 16, 32, 64):
        expected = np.mean([float(exact_pass_at_k(64, int(ci), k)) for ci in c])
        assert entry["pass@k"][str(k)] == pytest.approx(expected)
    assert entry["avg@n"] == pytest.approx(correct.mean())
    assert entry["avg@16"] == pytest.approx(correct[:, :16].mean())
    assert entry["avg@64"] == pytest.approx(correct.mean())
    assert entry["pass1"] == pytest.approx(correct[:, 0].mean())
    assert entry["maj@k"]["1"] == pytest.approx(correct[:, 0].mean())
    assert entry["maj@k"]["64"] == pytest.approx(np.mean(correct.sum(1) > 32))  # 2 classes: strict majority (ties -> first)
    assert entry["status_counts"] == {"correct": int(correct.sum() + correct[:, 0].sum()),
                                      "incorrect": int((~correct).sum() + (~correct[:, 0]).sum()),
                                      "no_answer": 0, "truncated": 0, "timeout": 0, "error": 0}
    assert entry["mean_completion_tokens"] == pytest.approx(np.mean([100 + s for s in range(64)] * 12 + [100] * 12))
    assert entry["truncated_fraction"] == pytest.approx(24 / (12 * 65))
    assert metrics["provenance"]["seed"] == 3 and metrics["provenance"]["bootstrap"] == 200


def test_bootstrap_ci_contains_point_estimate_and_is_reproducible():
    rng = np.random.default_rng(2)
    correct = rng.random((40, 16)) < 0.4
    rows = _rows("b", correct) + _rows("b", correct[:, :1], phase="pass1")
    first = compute_metrics(rows, bootstrap=500, seed=0)
    again = compute_metrics(rows, bootstrap=500, seed=0)
    other = compute_metrics(rows, bootstrap=500, seed=1)
    entry = first["benchmarks"]["b"]
    ci = entry["ci95"]
    for key in ("pass1", "avg@n", "avg@16"):
        assert ci[key][0] <= entry[key] <= ci[key][1] and ci[key][0] < ci[key][1]
    for family in ("pass@k", "maj@k"):
        for k, value in entry[family].items():
            assert ci[family][k][0] <= value <= ci[family][k][1]
    assert again["benchmarks"]["b"]["ci95"] == ci and other["benchmarks"]["b"]["ci95"] != ci
    assert compute_metrics(rows, bootstrap=0)["benchmarks"]["b"]["ci95"] == {}


def test_k_reported_only_when_every_problem_has_k_samples():
    rows = _rows("b", np.ones((3, 8), dtype=bool))
    rows = [r for r in rows if not (r["problem_id"] == "p2" and r["sample_idx"] >= 5)]  # p2 has 5 samples
    entry = compute_metrics(rows, bootstrap=0)["benchmarks"]["b"]
    assert list(entry["pass@k"]) == ["1", "2", "4"] and "avg@16" not in entry and "pass1" not in entry
    assert entry["n_samples_per_problem"] == 5 and entry["n_samples_per_problem_max"] == 8


def test_macro_average_and_default_benchmark():
    a = _rows("a", np.ones((4, 16), dtype=bool))
    b = _rows("b", np.zeros((6, 16), dtype=bool))
    d = [dict(r, benchmark=None) for r in _rows("x", np.ones((2, 4), dtype=bool))]
    metrics = compute_metrics(a + b, bootstrap=100)
    average = metrics["average"]
    assert average["avg@16"] == pytest.approx(0.5)  # unweighted: (1.0 + 0.0) / 2, not 4/10
    assert average["pass@k"]["16"] == pytest.approx(0.5) and average["benchmarks"] == ["a", "b"]
    assert average["ci95"]["avg@16"] == [pytest.approx(0.5), pytest.approx(0.5)]
    only_default = compute_metrics(d, bootstrap=10)
    assert list(only_default["benchmarks"]) == ["default"]


def test_bad_rows():
    with pytest.raises(DsdrError, match="missing field 'status'"):
        compute_metrics([{"problem_id": "x"}])


def test_table1_average_over_the_papers_five_benchmarks():
    rows = []
    for i, name in enumerate(("aime24", "aime25", "math500", "minerva", "olympiadbench", "amc23")):
        rows += _rows(name, np.arange(2 * 4).reshape(2, 4) % 6 <= i)
    metrics = compute_metrics(rows, bootstrap=20)
    five = [metrics["benchmarks"][n]["avg@n"] for n in ("aime24", "aime25", "math500", "minerva", "olympiadbench")]
    assert metrics["average_table1"]["avg@n"] == pytest.approx(np.mean(five))
    assert metrics["average"]["avg@n"] == pytest.approx(np.mean(five + [metrics["benchmarks"]["amc23"]["avg@n"]]))
    assert "average_table1" not in compute_metrics(rows[:8], bootstrap=0)


def _same_five_solved(names: tuple[str, ...]) -> list[dict]:
    """The constructed case of issue 9: benchmarks of 30 problems each, the same 5 solved."""
    solved = np.zeros((30, 1), dtype=bool)
    solved[:5] = True
    return [r for name in names for r in _rows(name, solved, phase="pass1")]


def test_equal_size_benchmarks_are_independent_strata_of_the_average_ci():
    """AIME24 and AIME25 (30 problems each) used to be resampled with the same indices: the
    stratified CI of their average was as wide as one benchmark's (0.233 at seed 0, B = 2000)
    instead of about 1/sqrt(2) of it (0.183)."""
    metrics = compute_metrics(_same_five_solved(("aime24", "aime25")), bootstrap=2000, seed=0)
    widths = [hi - lo for lo, hi in (metrics["benchmarks"][n]["ci95"]["pass1"] for n in ("aime24", "aime25"))]
    lo, hi = metrics["average"]["ci95"]["pass1"]
    # independent strata: sd of the average = sqrt(p (1 - p) / (2 * 30)), p = 1/6 -> 95% width ~ 0.189
    expected = 2 * 1.96 * math.sqrt((1 / 6) * (5 / 6) / 60)
    assert abs((hi - lo) - expected) < 0.03, (hi - lo, expected)
    assert hi - lo < 0.8 * min(widths)


def test_bootstrap_streams_depend_on_the_benchmark_name_only():
    rows = _same_five_solved(("aime24", "aime25", "amc23"))
    together = compute_metrics(rows, bootstrap=500, seed=4)["benchmarks"]
    alone = compute_metrics([r for r in rows if r["benchmark"] == "aime25"], bootstrap=500, seed=4)["benchmarks"]
    assert alone["aime25"]["ci95"] == together["aime25"]["ci95"]  # other benchmarks do not shift it
    from dsdr_eval.scoring.metrics import bootstrap_indices, stratified_bootstrap_means

    a, b = bootstrap_indices(4, "aime24", 30, 500), bootstrap_indices(4, "aime25", 30, 500)
    assert a.shape == (500, 30) and not np.array_equal(a, b)
    values = np.arange(30.0)
    assert np.array_equal(stratified_bootstrap_means({"aime24": values}, n_boot=500, seed=4), values[a].mean(axis=1))
    provenance = compute_metrics(rows, bootstrap=10)["provenance"]
    assert "SeedSequence" in provenance["bootstrap_streams"] and "sha256" in provenance["bootstrap_streams"]


def test_bootstrap_streams_are_stable_across_processes():
    """No salted hash(): the CIs are the same under any PYTHONHASHSEED."""
    import json
    import os
    import subprocess
    import sys

    code = ("import json, sys; from dsdr_eval.scoring.metrics import compute_metrics; "
            "rows = json.load(sys.stdin); print(json.dumps(compute_metrics(rows, bootstrap=300, seed=2)['benchmarks']"
            "['aime24']['ci95']))")
    rows = json.dumps(_same_five_solved(("aime24", "aime25")))
    outputs = {subprocess.run([sys.executable, "-c", code], input=rows, capture_output=True, text=True, check=True,
                              env=dict(os.environ, PYTHONHASHSEED=str(h))).stdout for h in (1, 2)}
    assert len(outputs) == 1


def test_paired_comparison_uses_the_same_stratified_bootstrap():
    from dsdr_eval.scoring.metrics import stratified_bootstrap_means
    from dsdr_eval.reporting import compare

    rng = np.random.default_rng(5)
    diffs = {"aime24": rng.integers(-1, 2, 30).astype(float), "aime25": rng.integers(-1, 2, 30).astype(float)}
    delta, lo, hi, _ = compare.paired_bootstrap(diffs, bootstrap=1000, seed=3)
    replicates = stratified_bootstrap_means(diffs, n_boot=1000, seed=3)
    assert delta == pytest.approx(np.mean([d.mean() for d in diffs.values()]))
    assert [lo, hi] == [pytest.approx(x) for x in np.percentile(replicates, [2.5, 97.5])]
    # the two equal-size strata are resampled independently (not with one index matrix)
    same = {"aime24": diffs["aime24"], "aime25": diffs["aime24"]}
    assert compare.paired_bootstrap(same, bootstrap=1000, seed=3)[1:3] != compare.paired_bootstrap(
        {"aime24": diffs["aime24"]}, bootstrap=1000, seed=3)[1:3]


def test_pass_at_k_for_every_power_of_two_up_to_n_darling_protocol():
    """n = 256 (darling-paper): pass@k and maj@k for k = 1 .. 256; pass@1 is the mean correctness of
    the samples (DARLING's pass@1) and pass@128 the unbiased estimator (Eq. 18)."""
    rng = np.random.default_rng(7)
    correct = rng.random((6, 256)) < np.linspace(0.002, 0.6, 6)[:, None]
    entry = compute_metrics(_rows("aime25", correct), bootstrap=50)["benchmarks"]["aime25"]
    powers = [str(2 ** e) for e in range(9)]
    assert list(entry["pass@k"]) == powers and list(entry["maj@k"]) == powers
    assert list(entry["ci95"]["pass@k"]) == powers
    c = correct.sum(axis=1)
    assert entry["pass@k"]["128"] == pytest.approx(np.mean([float(exact_pass_at_k(256, int(ci), 128)) for ci in c]))
    assert entry["pass@k"]["1"] == pytest.approx(correct.mean()) == pytest.approx(entry["avg@n"])
    assert entry["pass@k"]["256"] == pytest.approx(np.mean(c > 0))
    # a k is reported only when every problem has >= k samples: 200 samples -> up to 128
    fewer = compute_metrics(_rows("b", correct[:, :200]), bootstrap=0)["benchmarks"]["b"]
    assert list(fewer["pass@k"]) == powers[:-1]
    one = compute_metrics(_rows("b", correct[:, :1]), bootstrap=0)["benchmarks"]["b"]
    assert list(one["pass@k"]) == ["1"]
