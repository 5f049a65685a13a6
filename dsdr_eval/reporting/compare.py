"""Paired comparison of two evaluation runs on the same problems (paired bootstrap or t over problems).

For every benchmark and metric, each problem gets one score per run (its Pass@1 correctness, its
Avg@16 / Avg@n mean correctness, or its unbiased Pass@k from (n, c)); the problems are matched on
(benchmark, problem_id) and the report gives

* ``diff`` = mean over problems of (run - baseline), in the metric's units (fractions);
* a 95% percentile CI of that mean from ``bootstrap`` resamples of the *problems* with replacement
  (the same resampled problems for both runs: that is what makes the test paired);
* a two-sided p-value for "no difference" from the bootstrap distribution shifted to the null
  (Efron & Tibshirani 1993, §16.4; the paired-bootstrap test of Koehn 2004 / Berg-Kirkpatrick
  et al. 2012): ``p = (1 + #{|delta* - delta| >= |delta|}) / (1 + B)``.

The "average" row is the difference of the unweighted macro means over the benchmarks both runs
have; its bootstrap resamples problems within each benchmark (stratified), as Table 1 averages
benchmarks, not problems.

Few problems (a benchmark with fewer than ``FEW_PROBLEMS``): the percentile bootstrap's interval is too
narrow there (with n paired differences it behaves like a normal interval with the plug-in variance,
(n-1)/n of the unbiased one, instead of Student's t with n-1 degrees of freedom: at 8 problems it
gives a 95 % interval that excludes a true zero ~10 % of the time; tests/eval/test_compare_few.py
measures it). Such a row uses the paired t interval and t test instead (``paired_t``; the Average row
over benchmarks of which one is few: the stratified mean's t with Welch-Satterthwaite degrees of
freedom), and says so in ``interval`` ("t" / "bootstrap"). Either way the interval is over problems
of one evaluation of each model: a training seed's variation is not in it (docs/ablation_study.md).

The resampling is the one of ``metrics.json``'s CIs (``dsdr_eval.scoring.metrics.stratified_bootstrap_means``):
each benchmark's problems are resampled from the stream of (seed, benchmark name), the same for every
metric, so equal-size benchmarks are independent strata and a benchmark's row is the same whether
or not other benchmarks are compared.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.samples import PASS1, SAMPLING, iter_records, parse_graded
from dsdr_eval.scoring.metrics import pass_at_k, stratified_bootstrap_means
from dsdr_eval.rundir.results import AVERAGE, RunResults, order_benchmarks

DEFAULT_METRICS = ("pass1", "avg@16", "avg@n", "pass@8", "pass@32", "pass@64")
FEW_PROBLEMS = 30  # below this many problems in a benchmark its rows use the paired t interval, not the bootstrap


class MissingGrades(DsdrError):
    """A run has metrics.json but no graded.jsonl: its problems cannot be paired."""


@dataclass(frozen=True)
class ProblemOutcomes:
    """Correctness of one problem's rollouts in one run."""

    pass1: list[bool]  # the "pass1" phase (usually one rollout)
    sampling: list[bool]  # the "sampling" phase, ordered by sample_idx


def load_outcomes(run_dir: str | Path) -> dict[tuple[str, str], ProblemOutcomes]:
    """(benchmark, problem_id) -> outcomes, from RUN_DIR/graded.jsonl."""
    path = Path(run_dir) / rundir.GRADED
    if not path.exists():
        raise MissingGrades(f"{path}: file not found (a paired comparison needs the per-problem grades; "
                        f"run `dsdr-eval score {run_dir}`)")
    # one record at a time, keeping only its verdict: the completions of a large run are never all held
    per_problem: dict[tuple[str, str], dict[str, list[tuple[int, bool]]]] = defaultdict(lambda: defaultdict(list))
    for record in iter_records(path, parse_graded):
        key = record.key
        per_problem[(key.benchmark, key.problem_id)][key.phase].append((key.sample_idx, record.correct))

    def by_index(outcomes: list[tuple[int, bool]]) -> list[bool]:
        return [correct for _, correct in sorted(outcomes)]  # sample_idx is unique within a phase

    return {key: ProblemOutcomes(by_index(phases[PASS1]), by_index(phases[SAMPLING]))
            for key, phases in per_problem.items()}


def problem_score(outcomes: ProblemOutcomes, metric: str) -> float | None:
    """One problem's contribution to `metric` (its mean over problems is the benchmark's metric)."""
    if metric == "pass1":
        return float(np.mean(outcomes.pass1)) if outcomes.pass1 else None
    samples = outcomes.sampling
    if metric == "avg@n":
        return float(np.mean(samples)) if samples else None
    if metric.startswith("avg@"):
        k = int(metric[4:])
        return float(np.mean(samples[:k])) if len(samples) >= k else None
    if metric.startswith("pass@"):
        k = int(metric[5:])
        return float(pass_at_k(len(samples), int(sum(samples)), k)) if len(samples) >= k else None
    raise DsdrError(f"compare: unknown metric {metric!r} (pass1, avg@n, avg@K, pass@K)")


@dataclass(frozen=True)
class Comparison:
    baseline: str
    run: str
    benchmark: str
    metric: str
    n_problems: int
    baseline_value: float
    run_value: float
    diff: float
    ci95_lo: float
    ci95_hi: float
    p_value: float
    bootstrap: int
    seed: int
    interval: str = "bootstrap"  # "t" for a row with a benchmark of < FEW_PROBLEMS problems (paired_t)

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


def paired_bootstrap(diffs_by_stratum: Mapping[str, np.ndarray] | Sequence[np.ndarray], *, bootstrap: int,
                     seed: int = 0, rng: np.random.Generator | None = None) -> tuple[float, float, float, float]:
    """(delta, ci_lo, ci_hi, p) for the unweighted mean over strata of each stratum's mean difference.

    diffs_by_stratum: benchmark name -> array [n_problems] of per-problem (run - baseline); each
    stratum is resampled from the stream of (seed, name) (``metrics.stratified_bootstrap_means``).
    A plain sequence of arrays names the strata by position; ``rng`` draws all strata from it."""
    strata = dict(diffs_by_stratum) if isinstance(diffs_by_stratum, Mapping) else {
        str(i): d for i, d in enumerate(diffs_by_stratum)}
    strata = {name: np.asarray(d, dtype=float) for name, d in strata.items()}
    delta = float(np.mean([d.mean() for d in strata.values()]))
    replicates = stratified_bootstrap_means(strata, n_boot=bootstrap, seed=seed, rng=rng)
    lo, hi = np.percentile(replicates, [2.5, 97.5])
    extreme = int(np.sum(np.abs(replicates - delta) >= abs(delta) - 1e-12))
    p = (1 + extreme) / (1 + bootstrap)
    return delta, float(lo), float(hi), float(min(1.0, p))


def paired_t(diffs_by_stratum: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> tuple[float, float, float, float]:
    """(delta, ci_lo, ci_hi, p) for the unweighted mean over strata of each stratum's mean difference:
    Student's t interval and two-sided t test of delta = 0, with the stratified variance
    sum_h s_h^2 / (n_h H^2) and Welch-Satterthwaite degrees of freedom (n - 1 for one stratum).
    Every stratum needs >= 2 problems. Identical differences give the point interval (p = 1 at 0, else 0)."""
    from scipy import stats  # imported here: ~0.3 s, and only few-problem rows need it

    strata = list(diffs_by_stratum.values()) if isinstance(diffs_by_stratum, Mapping) else list(diffs_by_stratum)
    strata = [np.asarray(d, dtype=float) for d in strata]
    if any(d.size < 2 for d in strata):
        raise ValueError("paired_t: every stratum needs at least 2 problems")
    h = len(strata)
    delta = float(np.mean([d.mean() for d in strata]))
    parts = [d.var(ddof=1) / d.size / h ** 2 for d in strata]
    var = float(sum(parts))
    if var <= (1e-12 * max(1.0, abs(delta))) ** 2:
        return delta, delta, delta, (1.0 if abs(delta) <= 1e-12 else 0.0)
    df = var ** 2 / sum(v ** 2 / (d.size - 1) for v, d in zip(parts, strata) if v > 0)
    se = var ** 0.5
    q = float(stats.t.ppf(0.975, df))
    return delta, delta - q * se, delta + q * se, float(min(1.0, 2 * stats.t.sf(abs(delta) / se, df)))


def comparison_interval(strata: dict[str, np.ndarray], bootstrap: int,
                        seed: int) -> tuple[tuple[float, float, float, float], str]:
    """The paired t for a comparison with a benchmark of few problems (>= 2 each), else the bootstrap."""
    sizes = [d.size for d in strata.values()]
    if min(sizes) < FEW_PROBLEMS and min(sizes) >= 2:
        return paired_t(strata), "t"
    return paired_bootstrap(strata, bootstrap=bootstrap, seed=seed), "bootstrap"


def compare_runs(baseline: RunResults, run: RunResults, *, metrics=DEFAULT_METRICS, bootstrap: int = 2000,
                 seed: int = 0, allow_mismatch: bool = False) -> tuple[list[Comparison], list[str]]:
    """Paired comparisons (run - baseline) per shared benchmark and metric, plus warnings.

    Problem sets must match per benchmark; when they differ, raise DsdrError unless
    `allow_mismatch` (then compare on the shared problems and say so in the warnings)."""
    if bootstrap < 100:
        raise DsdrError(f"--bootstrap {bootstrap}: use at least 100 resamples")
    a_out, b_out = load_outcomes(baseline.path), load_outcomes(run.path)
    warnings: list[str] = []
    a_bench = defaultdict(set)
    b_bench = defaultdict(set)
    for bench, pid in a_out:
        a_bench[bench].add(pid)
    for bench, pid in b_out:
        b_bench[bench].add(pid)
    shared_benchmarks = order_benchmarks(set(a_bench) & set(b_bench))
    for bench in order_benchmarks(set(a_bench) ^ set(b_bench)):
        owner = baseline.label if bench in a_bench else run.label
        warnings.append(f"{bench}: only in {owner}; not compared")
    if not shared_benchmarks:
        raise DsdrError(f"compare {baseline.label} vs {run.label}: no benchmark in common")
    problems: dict[str, list[str]] = {}
    for bench in shared_benchmarks:
        shared = a_bench[bench] & b_bench[bench]
        if shared != a_bench[bench] or shared != b_bench[bench]:
            message = (f"{bench}: problem sets differ ({baseline.label}: {len(a_bench[bench])}, "
                       f"{run.label}: {len(b_bench[bench])}, shared: {len(shared)})")
            if not allow_mismatch:
                raise DsdrError(f"compare {baseline.path} vs {run.path}: {message}; a paired comparison needs the "
                                "same problems (pass --allow-mixed to compare on the shared problems only)")
            warnings.append(message + "; compared on the shared problems only")
        if not shared:
            continue
        problems[bench] = sorted(shared)
    results: list[Comparison] = []
    for metric in metrics:
        per_bench: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for bench, pids in problems.items():
            a = [problem_score(a_out[(bench, pid)], metric) for pid in pids]
            b = [problem_score(b_out[(bench, pid)], metric) for pid in pids]
            if any(x is None for x in a) or any(x is None for x in b):
                continue  # the metric is undefined for this benchmark (too few rollouts / no pass1 phase)
            per_bench[bench] = (np.asarray(a, dtype=float), np.asarray(b, dtype=float))
        # Streams from (seed, benchmark): results depend neither on the metric list nor on the other benchmarks.
        for bench, (a, b) in per_bench.items():
            (delta, lo, hi, p), how = comparison_interval({bench: b - a}, bootstrap, seed)
            results.append(Comparison(baseline.label, run.label, bench, metric, len(a), float(a.mean()),
                                      float(b.mean()), delta, lo, hi, p, bootstrap, seed, how))
        if len(per_bench) > 1:
            (delta, lo, hi, p), how = comparison_interval({bench: b - a for bench, (a, b) in per_bench.items()},
                                                          bootstrap, seed)
            results.append(Comparison(
                baseline.label, run.label, AVERAGE, metric, sum(len(a) for a, _ in per_bench.values()),
                float(np.mean([a.mean() for a, _ in per_bench.values()])),
                float(np.mean([b.mean() for _, b in per_bench.values()])), delta, lo, hi, p, bootstrap, seed, how))
    return results, warnings
