"""Design 3's solution routes at the final checkpoint (issue 47; docs/ablation_study.md "Design 3").

Exploratory (the registration lists routes as a secondary endpoint, no verdict). Per evaluated
checkpoint, per problem, over its correct T = 1.0 rollouts (graded.jsonl phase ``sampling``):

  * ``routes``: distinct formula routes by the registered rule, measure_task.py's (the ``$...$`` formulas
    before the graded box, correct and arithmetically valid, the route "no formula" left out);
  * ``routes_any_notation``: the same route key read from every equation before the answer's end,
    written with or without math delimiters (``3 x 11 = 33``, ``2 * 4 = 8``, ``3 × 11 = 33``,
    ``$3 \\times 11 = 33$``): integers joined by ``+ - * x × \\times \\cdot``, ``=``, an integer; the
    operator spellings are one operator. It exists because the trained policies of design 3 write
    their equations without ``$`` (measured: docs), which the registered rule and D_eq (Eq. 8, DIVER's
    delimiters) do not see;
  * ``notations``: distinct spellings of those equations among the correct rollouts (spaces dropped,
    the operator as written: ``3x11=33`` and ``3×11=33`` are two);
  * ``without_formula``: share of the correct rollouts whose cut solution holds no formula of the
    suite's D_eq extractor (``dsdr_eval.diversity_metrics.formula``), i.e. D_eq = 0 for them by Eq. 8.

A problem with no correct rollout has no value (left out of the problem mean). Per arm: the mean over
seeds (min..max) of each seed's mean over problems.

    python reports/ablation_study/design3/routes.py RUNS      # prints the table (analyze.py embeds it)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import hackwatch  # noqa: E402
from measure_task import analyse, evaluate  # noqa: E402

from dsdr_eval.diversity_metrics.formula import formula_set  # noqa: E402

ROUTE_KEYS = ("routes", "routes_any_notation", "notations", "without_formula")
_OPERATOR = r"(?:[+\-*x×]|\\times|\\cdot)"
# an equation of integers in any notation; a leading digit may not continue a longer token (a12 = ...)
_EQUATION = re.compile(r"(?<![\w.])\d+(?:\s*" + _OPERATOR + r"\s*\d+)+\s*=\s*\d+(?![\w.]\d)")
_SPELLINGS = re.compile(r"\\times|\\cdot|×|x")


def any_notation(solution: str, gold: int) -> tuple[str | None, list[str]]:
    """(route key, equation spellings) of one solution's equations in any notation; the route is None
    when it has no equation or one is arithmetically false (as measure_task.py's ``valid``)."""
    spellings, patterns, values = [], [], set()
    for eq in _EQUATION.findall(solution):
        spellings.append(re.sub(r"\s+", "", eq))
        left, right = (re.sub(r"\s+", "", side) for side in _SPELLINGS.sub("*", eq).split("="))
        lv, rv = evaluate(left), evaluate(right)
        if lv is None or rv is None or lv != rv:
            return None, spellings
        patterns.append(re.sub(r"\d+", "n", left))
        values.add(int(rv) if float(rv).is_integer() else rv)
    if not patterns:
        return None, spellings
    values.discard(gold)
    return f"{'; '.join(patterns)} | {', '.join(map(str, sorted(values)))}", spellings


def problem_routes(rows: list[dict]) -> dict[str, float] | None:
    """The four figures (module docstring) of one problem's T = 1.0 rows; None without a correct one."""
    # the rule is arithmetic on integers: a row without an integer gold (or its text) is not read
    correct = [r for r in rows if r.get("correct") is True and isinstance(r.get("completion"), str)
               and re.fullmatch(r"-?\d+", str(r.get("gold", "")).strip())]
    if not correct:
        return None
    registered, any_routes, spellings, bare = set(), set(), set(), 0
    for r in correct:
        gold = int(str(r["gold"]).strip())
        a = analyse(r["completion"], gold)
        if a["correct"] and a["valid"] and a["route"] != "no formula":
            registered.add(a["route"])
        end = hackwatch.answer_end(r)
        solution = r["completion"] if end is None else r["completion"][:end]
        route, spelled = any_notation(solution, gold)
        if route is not None:
            any_routes.add(route)
        spellings.update(spelled)
        bare += not formula_set(solution, ends_at_answer=end is not None)
    return {"routes": len(registered), "routes_any_notation": len(any_routes), "notations": len(spellings),
            "without_formula": bare / len(correct)}


def run_routes(run_dir: Path) -> dict[str, float]:
    """Mean over the problems with a correct rollout of each figure, for one evaluated checkpoint."""
    by_problem: dict[str, list[dict]] = {}
    with (run_dir / "graded.jsonl").open() as fh:
        for line in fh:
            if line.strip() and (r := json.loads(line)).get("phase") == "sampling":
                by_problem.setdefault(str(r.get("problem_id")), []).append(r)
    per = [v for rows in by_problem.values() if (v := problem_routes(rows)) is not None]
    return {k: (sum(v[k] for v in per) / len(per) if per else float("nan")) for k in ROUTE_KEYS} | {"problems": len(per)}


def routes_table(runs: Path, final: dict[str, dict[int, Path]]) -> list[dict]:
    """Per arm (base first when RUNS/base is evaluated): per seed the figures of ``final[arm][seed]``
    (its final checkpoint's run directory), then mean and min..max over seeds."""
    entries = ({"base": {0: runs / "base"}} if (runs / "base" / "graded.jsonl").exists() else {}) | final
    rows = []
    for arm, seeds in entries.items():
        per_seed = {s: run_routes(d) for s, d in sorted(seeds.items())}
        row: dict = {"arm": arm, "seeds": len(per_seed), "per_seed": per_seed}
        for k in ROUTE_KEYS:
            vals = [v[k] for v in per_seed.values() if v[k] == v[k]]
            if vals:
                row[k] = {"mean": sum(vals) / len(vals), "min": min(vals), "max": max(vals)}
        rows.append(row)
    return rows


def routes_markdown(rows: list[dict]) -> list[str]:
    def spread(v: dict | None) -> str:
        if v is None:
            return ""
        return f"{v['mean']:.2f}" if v["min"] == v["max"] else f"{v['mean']:.2f} ({v['min']:.2f}..{v['max']:.2f})"

    return ["Solution routes among the correct T = 1.0 rollouts, final checkpoint (exploratory; design3/routes.py): "
            "per problem, distinct formula routes by the registered rule (`$...$` formulas only), distinct routes "
            "in any notation (equations with or without `$`), distinct spellings of those equations, and the share of "
            "correct rollouts with no formula D_eq's extractor reads; mean (min..max) over seeds of the problem mean.",
            "", "| arm | seeds | " + " | ".join(ROUTE_KEYS) + " |", "|---|---|" + "---|" * len(ROUTE_KEYS),
            *(f"| {r['arm']} | {r['seeds']} | " + " | ".join(spread(r.get(k)) for k in ROUTE_KEYS) + " |" for r in rows),
            ""]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: routes.py RUNS", file=sys.stderr)
        return 2
    runs = Path(args[0])
    final = {arm.name: {int(s.name[1:]): max(s.glob("sweep/step_*"))
                        for s in sorted(arm.glob("s*")) if list(s.glob("sweep/step_*"))}
             for arm in sorted(runs.iterdir()) if arm.is_dir() and arm.name not in ("base", "data", "report")}
    try:
        print("\n".join(routes_markdown(routes_table(runs, {a: s for a, s in final.items() if s}))))
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
