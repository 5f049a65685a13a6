"""Long-format records of many runs (one dict per run x benchmark x ...): what the report's CSV files,
its figures and the dashboard's charts read (``RunResults`` from ``dsdr_eval.rundir.results``)."""

from __future__ import annotations

from typing import Any

from dsdr_eval.rundir.results import AVERAGE, DIVERSITY_MEASURES, DIVERSITY_SUBSETS, VALIDITY_SHARES, RunResults


def pass_at_k_records(runs: list[RunResults]) -> list[dict[str, Any]]:
    """One record per run x benchmark (+ average) x k: the unbiased Pass@k with its CI (fractions)."""
    records = []
    for run in runs:
        entries = [(name, bench.scores) for name, bench in run.benchmarks.items()]
        if run.average is not None and len(entries) > 1:  # one benchmark: it is its own average
            entries.append((AVERAGE, run.average.scores))
        for bench, scores in entries:
            for k, value in scores.at_k("pass").items():
                lo, hi = scores.interval(f"pass@{k}") or (None, None)
                records.append({"label": run.label, "benchmark": bench, "k": k, "value": value,
                                "ci95_lo": lo, "ci95_hi": hi})
    return records


def diversity_records(runs: list[RunResults]) -> list[dict[str, Any]]:
    """One record per run x benchmark x measure x subset with a defined value."""
    records = []
    for run in runs:
        for bench, results in run.benchmarks.items():
            if results.diversity is None:
                continue
            for measure in DIVERSITY_MEASURES:
                for subset in DIVERSITY_SUBSETS:
                    value = results.diversity.value(measure, subset)
                    if value is not None:
                        records.append({"label": run.label, "benchmark": bench, "measure": measure,
                                        "subset": subset, "value": value})
    return records


def validity_records(runs: list[RunResults]) -> list[dict[str, Any]]:
    """One record per run x benchmark with diversity: the validity line's shares (``VALIDITY_SHARES``),
    None where the run was measured before that share existed: the hack watch of every checkpoint."""
    return [{"label": run.label, "benchmark": bench, **{name: results.diversity.validity.get(name)
                                                         for name in VALIDITY_SHARES}}
            for run in runs for bench, results in run.benchmarks.items() if results.diversity is not None]


def judge_records(runs: list[RunResults]) -> list[dict[str, Any]]:
    """One record per run x benchmark with judge scores: the mean of each axis (0-10)."""
    return [{"label": run.label, "benchmark": bench, **dict(results.judge.axes)}
            for run in runs for bench, results in run.benchmarks.items()
            if results.judge is not None and any(v is not None for v in results.judge.axes.values())]


def judge_grading_records(runs: list[RunResults]) -> list[dict[str, Any]]:
    """One record per run x benchmark scored with `--judge-grading`: its accuracies and counts."""
    return [{"label": run.label, "benchmark": bench, "mode": results.judge_grading.mode,
             **results.judge_grading.accuracy, **results.judge_grading.counts}
            for run in runs for bench, results in run.benchmarks.items() if results.judge_grading is not None]
