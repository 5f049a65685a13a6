"""The studies recomputed with the solution cut (issue 42, item 7): what changed, measured from the raw files.

The evaluation run directories of a design (RUNS/base, RUNS/<arm>/s<seed>/sweep/step_*) were re-graded with
`dsdr-eval score RUN_DIR` (which records ``answer_end``) and re-measured with `dsdr-eval diversity RUN_DIR`
(rule answer-end v1). This script reads them beside the committed state before that (git revision BEFORE)
and prints / writes as JSON:

  * verdicts: per sample (problem, phase, sample_idx) `correct` and `status` before vs now; any change of
    `correct` is a changed verdict; a status relabel with the same `correct` is listed apart;
  * D_eq (Eq. 8) of the final checkpoint per arm, recomputed here from graded.jsonl with the project's
    formula extractor under four cuts: none (the whole completion, as before), the end of the FIRST
    `\\boxed{}` (the issue's quick check; spans as before, and with a span still open closing there) and the
    end of the GRADED answer (the rule; must equal the `diversity` command's d_eq, checked), with the
    DSDR - GRPO paired t interval over seeds (analyze.claim_interval, as the claims);
  * identical evaluation rollouts of two arms at the same seed (same prompts and sampling seed):
    completions, solutions cut at the graded answer, and those solutions with every `$` removed
    (the dropped-`$` variants made equal);
  * distinct solutions among correct rollouts per problem (exact text of the cut solution), per arm.

    python reports/ablation_study/cut_compare.py --runs reports/ablation_study/design2/runs --before 014305f
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from dsdr_eval.diversity_metrics.formula import formula_set, formula_uniqueness

_spec = importlib.util.spec_from_file_location("ablation_analyze", Path(__file__).with_name("analyze.py"))
analyze = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("ablation_analyze", analyze)
_spec.loader.exec_module(analyze)

PAIRS = (("dsdr", "grpo"), ("dsdr_wo_gd", "grpo"), ("dsdr", "dsdr_wo_gc"), ("darling", "grpo"))
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def _rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def eval_dirs(runs: Path) -> list[Path]:
    return sorted(p.parent for p in runs.rglob("graded.jsonl") if "report" not in p.parts)


def verdict_changes(runs: Path, before: str) -> dict:
    """Per sample, `correct` and `status` in the committed graded.jsonl at ``before`` vs now."""
    out = {"files": 0, "samples": 0, "correct_changed": [], "status_relabels": {}}
    for d in eval_dirs(runs):
        old = _rows(subprocess.run(["git", "show", f"{before}:{d / 'graded.jsonl'}"], capture_output=True,
                                   text=True, check=True).stdout)
        key = lambda r: (r["problem_id"], r["phase"], r["sample_idx"])  # noqa: E731
        new = {key(r): r for r in _rows((d / "graded.jsonl").read_text())}
        out["files"] += 1
        for r in old:
            n = new[key(r)]
            out["samples"] += 1
            if bool(n["correct"]) != bool(r["correct"]):
                out["correct_changed"].append([str(d), *key(r), r["correct"], n["correct"]])
            elif n["status"] != r["status"]:
                t = f"{r['status']} -> {n['status']}"
                out["status_relabels"][t] = out["status_relabels"].get(t, 0) + 1
    return out


def _first_box_end(text: str) -> int | None:
    """End of the first brace-matched `\\boxed{...}`/`\\fbox{...}` (None: no closed box)."""
    m = _BOX.search(text)
    if m is None:
        return None
    depth, i = 1, m.end()
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return i if depth == 0 else None


def texts(r: dict, cut: str) -> tuple[str, bool]:
    """(measured text, spans close at its end) of one graded rollout under ``cut``."""
    c, end = r["completion"], (r.get("answer_end") if r.get("extracted") is not None else None)
    if cut == "none":
        return c, False
    if cut.startswith("first-box"):
        fb = _first_box_end(c)
        return (c, False) if fb is None else (c[:fb], cut == "first-box-close")
    return (c, False) if end is None else (c[:end], True)


CUTS = ("none", "first-box", "first-box-close", "answer-end")


def d_eq_by_problem(run_dir: Path, cut: str) -> dict[str, float]:
    groups: dict[str, list[dict]] = {}
    for r in _rows((run_dir / "graded.jsonl").read_text()):
        if r["phase"] == "sampling":
            groups.setdefault(r["problem_id"], []).append(r)
    out = {}
    for pid, rows in groups.items():
        sets = [formula_set(t, ends_at_answer=close) for t, close in (texts(r, cut) for r in rows)]
        out[pid] = float(formula_uniqueness(sets).mean())
    return out


def final_dirs(runs: Path) -> dict[str, dict[int, Path]]:
    data = analyze.load_runs(runs)
    return {arm: {s: runs / arm / f"s{s}" / "sweep" / f"step_{c[-1].step:06d}" for s, c in seeds.items()}
            for arm, seeds in data.items()}


def d_eq_cuts(runs: Path) -> dict:
    finals = final_dirs(runs)
    per = {cut: {arm: {s: d_eq_by_problem(d, cut) for s, d in seeds.items()} for arm, seeds in finals.items()}
           for cut in CUTS}
    # the rule recomputed here equals what `dsdr-eval diversity` wrote
    worst = 0.0
    for arm, seeds in finals.items():
        for s, d in seeds.items():
            for r in _rows((d / "diversity_per_problem.jsonl").read_text()):
                worst = max(worst, abs(r["all"]["d_eq"] - per["answer-end"][arm][s][r["problem_id"]]))
    out = {"max_abs_diff_vs_diversity_command": worst, "arms": {}, "dsdr_minus_grpo": {}}
    for cut in CUTS:
        out["arms"][cut] = {arm: float(np.mean([np.mean(list(v.values())) for v in seeds.values()]))
                            for arm, seeds in per[cut].items()}
        if "dsdr" in per[cut] and "grpo" in per[cut]:
            shared = sorted(set(per[cut]["dsdr"]) & set(per[cut]["grpo"]))
            means = [float(np.mean([per[cut]["dsdr"][s][p] - per[cut]["grpo"][s][p] for p in per[cut]["dsdr"][s]]))
                     for s in shared]
            out["dsdr_minus_grpo"][cut] = dict(zip(("diff", "lo", "hi", "p"), analyze.claim_interval(means)))
    return out


def _solutions(run_dir: Path, how: str) -> dict[tuple, str]:
    out = {}
    for r in _rows((run_dir / "graded.jsonl").read_text()):
        t = r["completion"] if how == "completion" else texts(r, "answer-end")[0]
        out[(r["problem_id"], r["phase"], r["sample_idx"])] = t.replace("$", "") if how == "solution-no-$" else t
    return out


def identical(runs: Path) -> dict:
    finals = final_dirs(runs)
    out: dict = {}
    for a, b in PAIRS:
        if a not in finals or b not in finals:
            continue
        for how in ("completion", "solution", "solution-no-$"):
            counts = {}
            for s in sorted(set(finals[a]) & set(finals[b])):
                sa, sb = _solutions(finals[a][s], how), _solutions(finals[b][s], how)
                counts[s] = sum(sa[k] == sb.get(k) for k in sa)
            out.setdefault(f"{a} vs {b}", {})[how] = counts
    return out


def correct_solutions(runs: Path) -> dict:
    """Per arm: mean over seeds and problems (with >= 2 correct rollouts) of the number of distinct cut
    solutions among the correct rollouts, and of distinct whole completions."""
    out = {}
    for arm, seeds in final_dirs(runs).items():
        vals: dict[str, list[int]] = {"solution": [], "completion": [], "n_correct": []}
        for d in seeds.values():
            groups: dict[str, list[dict]] = {}
            for r in _rows((d / "graded.jsonl").read_text()):
                if r["phase"] == "sampling" and r["correct"]:
                    groups.setdefault(r["problem_id"], []).append(r)
            for rows in groups.values():
                if len(rows) >= 2:
                    vals["solution"].append(len({texts(r, "answer-end")[0] for r in rows}))
                    vals["completion"].append(len({r["completion"] for r in rows}))
                    vals["n_correct"].append(len(rows))
        out[arm] = {k: float(np.mean(v)) if v else None for k, v in vals.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", required=True)
    p.add_argument("--before", required=True, help="git revision holding the graded.jsonl files before re-scoring")
    p.add_argument("--out", help="write the JSON here too")
    args = p.parse_args(argv)
    runs = Path(args.runs)
    result = {"runs": str(runs), "before": args.before, "verdicts": verdict_changes(runs, args.before),
              "d_eq": d_eq_cuts(runs), "identical": identical(runs), "correct_solutions": correct_solutions(runs)}
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
