"""The budget curves of metrics.json as the report and the dashboard read them (issue 45;
``dsdr_eval/scoring/budget_curve.py`` computes them): ``read_budget_curve`` checks a benchmark's ``budget_curve``,
``budget_curve_records`` flattens the runs' curves into records (one per run x benchmark x budget)."""

from __future__ import annotations

from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir import result_fields as fields


def read_budget_curve(curve: Any, where: str) -> dict[int, dict[str, Any]]:
    """metrics.json ``budget_curve``: budget (a positive integer key) -> an object with fractions
    ``accuracy`` and ``finished`` (other fields kept as written)."""
    if curve is None:
        return {}
    out: dict[int, dict[str, Any]] = {}
    for key, point in fields.obj(curve, where).items():
        if not str(key).isdigit() or int(key) < 1:
            raise DsdrError(f"{where}: key {key!r} is not a token budget (a positive integer)")
        point = fields.obj(point, f"{where}.{key}")
        for name in ("accuracy", "finished"):
            fields.fraction(point.get(name), f"{where}.{key}.{name}")
        out[int(key)] = dict(point)
    return dict(sorted(out.items()))


def budget_curve_records(runs: list[Any]) -> list[dict[str, Any]]:
    """One record per run x benchmark x budget of its budget curve (fractions): accuracy, finished and the
    truncated share at that budget (1 - finished)."""
    return [{"label": run.label, "benchmark": name, "budget": budget, "accuracy": point.get("accuracy"),
             "finished": point.get("finished"),
             "not_finished": None if point.get("finished") is None else 1 - point["finished"]}
            for run in runs for name, bench in run.benchmarks.items() for budget, point in bench.budget_curve.items()]
