"""The cost of the budget curve (issue 45) in the metrics pass, side by side with the metrics without it.

Builds graded records of a thinking-model run in memory -- P problems x n rollouts, token counts up to
--max-tokens (a mix of finished and cut rollouts), answer classes and reasoning counts -- and times
``MetricsAccumulator`` (the streamed metrics ``score`` computes, one problem at a time) with and without the
curve (``BudgetCurveTally.add`` / ``entries`` made no-ops for the second), each the best of --repeat runs.
The curve reads only a few integers per rollout, never the texts, so its cost does not grow with the size of
the samples file: a 2 GB run of 250 problems x 64 rollouts x 128 KB has the same records here as a small one
(its texts cost the reading and grading, not the curve).

    python benchmarks/bench_budget_curve.py                          # 250 x 64, max 32768 tokens
    python benchmarks/bench_budget_curve.py --problems 2000 --n 64
"""

from __future__ import annotations

import argparse
import time
from unittest import mock

import numpy as np


def records(problems: int, n: int, max_tokens: int, seed: int = 0) -> list:
    from dsdr_eval.rundir.samples import GradedSample, Sample

    rng = np.random.default_rng(seed)
    out = []
    for p in range(problems):
        for j in range(n):
            tokens = int(min(max_tokens, rng.lognormal(8.5, 0.8)))
            cut = tokens >= max_tokens
            correct = (not cut) and rng.random() < 0.6
            sample = Sample("aime", f"p{p}", j, "sampling", None, "1", None, None, "", "length" if cut else "stop",
                            100, tokens, 0.6, 0.95, max_tokens, j, n_reasoning_tokens=int(tokens * 0.9))
            out.append(GradedSample(sample, "correct" if correct else "truncated" if cut else "incorrect", correct,
                                    None if cut else int(rng.integers(0, 4)), reasoning_state="closed"))
    return out


def timed(graded: list, n: int, *, curve: bool, repeat: int) -> tuple[float, dict]:
    from dsdr_eval.scoring.budget_curve import BudgetCurveTally
    from dsdr_eval.scoring.metrics import MetricsAccumulator

    best, result = float("inf"), {}
    for _ in range(repeat):
        with mock.patch.object(BudgetCurveTally, "add", lambda *a, **k: None) if not curve else _nothing(), \
                mock.patch.object(BudgetCurveTally, "entries", lambda *a, **k: {}) if not curve else _nothing():
            t0 = time.perf_counter()
            acc = MetricsAccumulator()
            for start in range(0, len(graded), n):
                acc.add(start // n, graded[start:start + n])
            result = acc.result(bootstrap=1000, seed=0)
            best = min(best, time.perf_counter() - t0)
    return best, result


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=250)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=32768)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    graded = records(args.problems, args.n, args.max_tokens)
    without, _ = timed(graded, args.n, curve=False, repeat=args.repeat)
    with_curve, result = timed(graded, args.n, curve=True, repeat=args.repeat)
    curve = result["benchmarks"]["aime"]["budget_curve"]
    print(f"{args.problems} problems x {args.n} rollouts, max_tokens {args.max_tokens}: {len(curve)} budgets")
    print(f"metrics without the curve  {without:8.3f} s")
    print(f"metrics with the curve     {with_curve:8.3f} s   ratio {with_curve / without:.2f}x  "
          f"(curve alone {with_curve - without:.3f} s, {1e6 * (with_curve - without) / len(graded):.1f} us/rollout)")


if __name__ == "__main__":
    main()
