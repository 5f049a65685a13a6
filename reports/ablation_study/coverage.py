"""Coverage of the study's intervals at few seeds, by simulation (docs/ablation_study.md "Analysis").

Under a null where the two arms of a claim are the same process, a verdict ("holds" / "does not hold")
is a false one; a 95 % interval must give one at most 5 % of the time. Each replicate draws a study of
S seeds x P problems for two arms A and B from one hierarchical model and forms d[s, p] = A - B:

  * ``gaussian``: X[arm, s, p] = problem effect + seed effect (sd ``seed_sd``, the training run) + cell
    noise (sd 1); the problem effect is shared by both arms (paired), so it cancels in d.
  * ``bernoulli``: a pass@1-like 0/1 outcome, P(correct) = sigmoid(problem difficulty + seed effect),
    difficulty ~ N(0, 1.5), seed effect ~ N(0, ``seed_sd``); d in {-1, 0, 1}.

The rate of false verdicts is measured for the t interval over seed means (``analyze.claim_interval``,
what the claims use) and for the two-way percentile bootstrap used before (``analyze.paired_bootstrap``),
and, for a family of ``FAMILY`` independent null claims, the rate of any false verdict after Holm's
correction (``analyze.holm``). Deterministic: numpy's generator from ``--seed``.

    python reports/ablation_study/coverage.py --out reports/ablation_study/coverage
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Callable

import numpy as np

# analyze.py is a script beside this one, not a package module
_spec = importlib.util.spec_from_file_location("ablation_analyze", Path(__file__).with_name("analyze.py"))
analyze = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("ablation_analyze", analyze)
_spec.loader.exec_module(analyze)

FAMILY = 15  # the number of claims analyze.claims tests
Interval = Callable[[np.ndarray], tuple[float, float]]  # d[seed, problem] -> (lo, hi)


def null_study(rng: np.random.Generator, seeds: int, problems: int, kind: str, seed_sd: float = 1.0) -> np.ndarray:
    """d[s, p] = A[s, p] - B[s, p] with A and B drawn from the same process (the null)."""
    if kind == "gaussian":
        problem = rng.normal(0, 1, problems)
        a = problem + rng.normal(0, seed_sd, (seeds, 1)) + rng.normal(0, 1, (seeds, problems))
        b = problem + rng.normal(0, seed_sd, (seeds, 1)) + rng.normal(0, 1, (seeds, problems))
        return a - b
    if kind == "bernoulli":
        difficulty = rng.normal(0, 1.5, problems)

        def arm() -> np.ndarray:
            logit = difficulty + rng.normal(0, seed_sd, (seeds, 1))
            return (rng.random((seeds, problems)) < 1 / (1 + np.exp(-logit))).astype(float)
        return arm() - arm()
    raise ValueError(f"unknown null model {kind!r} (gaussian, bernoulli)")


def t_over_seeds(d: np.ndarray) -> tuple[float, float]:
    """The claims' interval: analyze.claim_interval over the seed means of d."""
    return analyze.claim_interval(d.mean(axis=1))[1:3]


def percentile_bootstrap(d: np.ndarray, n_boot: int = 1000) -> tuple[float, float]:
    """The interval used before: the two-way percentile bootstrap (seeds x problems), RNG seed 0."""
    return analyze.paired_bootstrap(d, n_boot, 0)[1:3]


def false_verdict_rate(interval: Interval, seeds: int, problems: int, kind: str, reps: int, seed: int = 0) -> float:
    """Fraction of null replicates whose 95 % interval excludes 0 (a verdict where there is no effect).
    An all-zero d (inert arms) gives the point interval [0, 0]: no verdict, as it should."""
    rng = np.random.default_rng(seed)
    false = 0
    for _ in range(reps):
        lo, hi = interval(null_study(rng, seeds, problems, kind))
        false += int(lo > 0 or hi < 0)
    return false / reps


def familywise_rate(seeds: int, problems: int, kind: str, reps: int, seed: int = 0, family: int = FAMILY) -> float:
    """Fraction of replicates of ``family`` independent null claims in which any verdict is made after
    Holm's correction of the claims' t-test p-values (analyze.claim_interval, analyze.holm)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        ps = [analyze.claim_interval(null_study(rng, seeds, problems, kind).mean(axis=1))[3] for _ in range(family)]
        hits += int(any(p < analyze.ALPHA for p in analyze.holm(ps)))
    return hits / reps


def table(reps: int, problems: int, seed: int, seed_counts=(3, 4, 5)) -> list[dict]:
    """The t interval is cheap: 10 x ``reps`` replicates (Monte Carlo s.e. ~0.002 at 10000); the bootstrap
    (1000 resamples each) and the Holm family (15 claims each) ``reps``."""
    rows = []
    for kind in ("gaussian", "bernoulli"):
        for s in seed_counts:
            rows.append({"null": kind, "seeds": s, "problems": problems, "reps_t": 10 * reps, "reps": reps,
                         "t_over_seeds": false_verdict_rate(t_over_seeds, s, problems, kind, 10 * reps, seed),
                         "percentile_bootstrap": false_verdict_rate(percentile_bootstrap, s, problems, kind, reps, seed),
                         "holm_familywise": familywise_rate(s, problems, kind, reps, seed)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--reps", type=int, default=1000)
    p.add_argument("--problems", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.reps < 1 or args.problems < 1:
        print("error: --reps and --problems must be >= 1", file=sys.stderr)
        return 2
    rows = table(args.reps, args.problems, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "coverage.json").write_text(json.dumps({"rows": rows, "family": FAMILY, "seed": args.seed}, indent=1) + "\n")
    se, se_t = ((0.05 * 0.95 / n) ** 0.5 for n in (args.reps, 10 * args.reps))
    lines = ["# Coverage of the claims' intervals at few seeds (coverage.py)", "",
             f"Share of null studies (two arms = one process; {args.problems} problems) in which a 95 % interval "
             f"excludes 0, i.e. a false 'holds' / 'does not hold'. Must be <= 0.05. Replicates: {10 * args.reps} "
             f"for the t interval (Monte Carlo s.e. ~{se_t:.3f}), {args.reps} for the bootstrap (~{se:.3f}). "
             f"Holm: any false verdict among {FAMILY} independent null claims after Holm's correction of their "
             f"t-test p-values ({args.reps} replicates).", "",
             "| null model | seeds | t over seed means (used) | two-way percentile bootstrap (before) | Holm, family of "
             f"{FAMILY} |", "|---|---|---|---|---|"]
    lines += [f"| {r['null']} | {r['seeds']} | {r['t_over_seeds']:.3f} | {r['percentile_bootstrap']:.3f} | "
              f"{r['holm_familywise']:.3f} |" for r in rows]
    (out / "coverage.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
