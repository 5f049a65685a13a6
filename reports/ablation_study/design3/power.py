"""Design 3's power analysis, before any unit runs (issue 47 item 3; docs/ablation_study.md "Design 3").

1. The seed-to-seed spread of each registered endpoint's paired difference, from design 2's committed
   runs (reports/ablation_study/design2/runs, final checkpoint, step 16): per seed s the mean over
   problems of A - B, m_s, and sd(m) over the 5 seeds, for
     * D_eq and D_emb among the correct rollouts (Eqs. 8 and 7, dsdr_eval.diversity_metrics), on each
       rollout's text cut at the end of its graded answer (hackwatch.answer_end: the grader's last
       ``\\boxed{}``), over the problems where both arms have >= 2 correct rollouts at that seed;
       beside them the same on the uncut text (as committed in diversity_per_problem.jsonl);
     * avg@32 (the share of the 32 T = 1.0 rollouts graded correct), every problem.
2. The minimum detectable effect (MDE) of the registered test -- the two-sided one-sample t test of the
   S seed means of a paired difference -- at 80 % power: the smallest delta with
   P(|T| > t_{S-1, 1-a/2}) >= 0.8, T noncentral t with S - 1 degrees of freedom and noncentrality
   delta sqrt(S) / sd, solved exactly (the noncentral t's tail integrated over its chi-square part). Given at a = 0.05 (Holm's last step) and at
   a = 0.05 / m (Holm's first, strictest step over the m registered claims).

    python reports/ablation_study/design3/power.py --runs reports/ablation_study/design2/runs > reports/ablation_study/design3/power.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy import integrate, optimize, stats

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "reports" / "ablation_study"))

from hackwatch import answer_end  # noqa: E402

PAIRS = (("dsdr", "grpo"), ("dsdr", "dsdr_wo_gd"))
ENDPOINTS = ("d_eq_correct_cut", "d_emb_correct_cut", "avg@32", "d_eq_correct_uncut", "d_emb_correct_uncut")


def mde(sd: float, seeds: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true mean difference the two-sided one-sample t test of ``seeds`` seed means (spread
    ``sd``) rejects with probability ``power`` at level ``alpha`` (module docstring)."""
    if seeds < 2 or not sd > 0:
        return math.nan
    df, crit = seeds - 1, stats.t.ppf(1 - alpha / 2, seeds - 1)

    def achieved(delta: float) -> float:
        return t_test_power(delta * math.sqrt(seeds) / sd, df, crit) - power

    hi = sd / math.sqrt(seeds)
    while achieved(hi) < 0:
        hi *= 2
    return float(optimize.brentq(achieved, 1e-9 * sd, hi, xtol=1e-10))


def t_test_power(nc: float, df: int, crit: float) -> float:
    """P(|T| > crit) for T = (Z + nc) / sqrt(V / df), Z standard normal, V chi-square(df): the power of
    the two-sided t test at noncentrality nc, integrated over V (scipy's nct is NaN in the far tail)."""
    def integrand(v: float) -> float:
        c = crit * math.sqrt(v / df)
        return (stats.norm.sf(c - nc) + stats.norm.cdf(-c - nc)) * stats.chi2.pdf(v, df)

    return float(integrate.quad(integrand, 0, np.inf, limit=200)[0])


def _final_run(runs: Path, arm: str, seed: int) -> Path:
    steps = sorted((runs / arm / f"s{seed}" / "sweep").glob("step_*"))
    return steps[-1]


def _by_problem(run: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for line in (run / "graded.jsonl").open():
        r = json.loads(line)
        if r["phase"] == "sampling":
            out.setdefault(r["problem_id"], []).append(r)
    return out


def cell(run: Path, encoder) -> dict[str, dict[str, float]]:
    """Per problem: avg@32, and D_eq / D_emb among its correct rollouts on cut and uncut text."""
    from dsdr_eval.diversity_metrics.combined import dsdr_diversity

    uncut = {}
    for line in (run / "diversity_per_problem.jsonl").open():
        r = json.loads(line)
        uncut[r["problem_id"]] = r.get("correct") or {}
    out: dict[str, dict[str, float]] = {}
    for pid, rows in _by_problem(run).items():
        correct = [r for r in rows if r["correct"]]
        values = {"avg@32": len(correct) / len(rows)}
        if len(correct) >= 2:
            cut = [r["completion"][:answer_end(r)] if answer_end(r) is not None else r["completion"] for r in correct]
            div = dsdr_diversity(cut, encoder=encoder)
            values.update({"d_eq_correct_cut": float(div.d_eq.mean()), "d_emb_correct_cut": float(div.d_emb.mean()),
                           "d_eq_correct_uncut": float(uncut[pid]["d_eq"]),
                           "d_emb_correct_uncut": float(uncut[pid]["d_emb"])})
        out[pid] = values
    return out


def seed_differences(runs: Path, encoder, seeds: list[int]) -> dict[str, dict[str, list[float]]]:
    """{"A-B": {endpoint: [m_s for each seed]}} (module docstring, step 1)."""
    cells = {(arm, s): cell(_final_run(runs, arm, s), encoder) for pair in PAIRS for arm in pair for s in seeds}
    out: dict[str, dict[str, list[float]]] = {}
    for a, b in PAIRS:
        per: dict[str, list[float]] = {e: [] for e in ENDPOINTS}
        for s in seeds:
            ca, cb = cells[(a, s)], cells[(b, s)]
            for e in ENDPOINTS:
                ids = sorted(p for p in ca if e in ca[p] and p in cb and e in cb[p])
                per[e].append(float(np.mean([ca[p][e] - cb[p][e] for p in ids])) if ids else math.nan)
        out[f"{a}-{b}"] = per
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", required=True, help="design 2's runs directory")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--claims", type=int, default=6, help="m, the registered claims Holm corrects over")
    p.add_argument("--diffs", help="reuse the seed means of an earlier output (its pairs.*.*.seed_means)")
    p.add_argument("--plan", type=int, nargs="+", default=[5, 8, 10, 12, 16], help="seed counts to give the MDE at")
    args = p.parse_args(argv)
    from dsdr_eval.diversity_metrics.semantic import load_encoder

    if args.diffs:
        earlier = json.loads(Path(args.diffs).read_text())["pairs"]
        diffs = {pair: {e: v["seed_means"] for e, v in rows.items()} for pair, rows in earlier.items()}
    else:
        diffs = seed_differences(Path(args.runs), load_encoder(), list(range(args.seeds)))
    report = {"source": args.runs, "claims": args.claims, "pairs": {}}
    for pair, per in diffs.items():
        rows = {}
        for e, m in per.items():
            m = [x for x in m if not math.isnan(x)]
            sd = float(np.std(m, ddof=1)) if len(m) >= 2 else math.nan
            rows[e] = {"seed_means": m, "mean": float(np.mean(m)) if m else math.nan, "sd": sd,
                       # 95 % chi-square interval of sd from len(m) - 1 degrees of freedom: how well 5 seeds know it
                       "sd_ci95": [sd * math.sqrt((len(m) - 1) / stats.chi2.ppf(q, len(m) - 1)) for q in (0.975, 0.025)]
                       if len(m) >= 2 else None,
                       "mde": {str(s): {"alpha_0.05": mde(sd, s), f"alpha_0.05/{args.claims}": mde(sd, s, 0.05 / args.claims)}
                               for s in args.plan}}
        report["pairs"][pair] = rows
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
