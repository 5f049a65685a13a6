"""Stress test for dsdr_eval.grading.grade_samples: many rounds of random short completions.

Mirrors the trainer's use (dsdr_train/train.py calls grade_samples every step with groups of
~10-token completions, many without a boxed answer): each round draws a random batch of
problems x samples from a mixture of no-answer text, empty strings, "Answer: 5", "\\boxed{}",
duplicates, right answers in other forms, wrong numbers, garbage, all-no-answer problems and
(rarely) slow hostile answers that hit the deadline, so the kill + respawn paths run too.
Half of the rounds go through one GradingPool reused across calls, the others start workers.

Every round checks the output contract (status in STATUSES, correct == (status == correct),
answer_class None exactly when there is no answer, classes numbered 0.. by first appearance,
equal extracted answers in a problem share a class, correct answers share one class).

Usage: python benchmarks/stress_grading.py [--rounds 200] [--seed 0] [--timeout 1.0]
       python benchmarks/stress_grading.py --step-timing [--samples RUN/samples.jsonl ...]
       python benchmarks/stress_grading.py --slow-siblings 4 8 [--timeout 5]
The second form times trainer-like grading steps (2 problems x 8 completions, timeout 5 s):
fresh workers per call (what dsdr_train did) vs one reused GradingPool (what it does now).
The third (issue 24) grades one problem of n distinct slow answers \boxed{(x+k)^{300}} (gold 204;
each class comparison of two takes seconds) for each n given, and one \boxed{9!!!!!!!} (stuck in
C code: the worker is killed), with one worker: wall time against the bound n x timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback

from dsdr_eval.grading import STATUSES, GradingPool, grade_samples

NO_ANSWER = ["", " ", "\n", " 5 + 3 = 8\nQ: 2", " I think it is", "Q: 4 + 4 = ?\nA:", " \\box", " \\boxed{",
             " \\boxed", "Answer:", "Answer: ", "answer: **", "The answer is .", " \\boxed{ }", " \\boxed{}",
             "\\boxed{}\\boxed{}", "$$", "Answer: $ $"]
GARBAGE = ["\\boxed{\\frac{}{}}", "\\boxed{??}", "\\boxed{\\}", "Answer: ^^^", "\\boxed{x=}", "\\boxed{)(}",
           "\\boxed{\\left(}", "Answer: \\", "\\boxed{abc def}", "\\boxed{1,2,3}", "\\boxed{-}", "\\boxed{\\infty}",
           "\\boxed{0/0}", "\\boxed{1/0}", "\\boxed{\\sqrt{-1}}", "\\boxed{nan}", "\\boxed{\\text{}}"]
# Slow for sympy/math-verify: with a 1 s timeout these end as "timeout" (inner alarm) or kill the worker.
SLOW = ["\\boxed{9^{9^{9^{9^{9}}}}}", "\\boxed{(x+1)^{99999} - (x+1)^{99998}}", "\\boxed{100000!}",
        "\\boxed{" + "+".join(f"x^{{{k}}}" for k in range(3000)) + "}"]


def right_forms(gold: int) -> list[str]:
    return [f"\\boxed{{{gold}}}", f" \\boxed{{{gold}}}\nQ:", f"Answer: {gold}", f"\\boxed{{{gold}.0}}",
            f"\\boxed{{\\frac{{{2 * gold}}}{{2}}}}", f"The answer is ${gold}$.", f"\\boxed {gold}",
            f"\\boxed{{{gold}}}.", f"\\fbox{{{gold}}}", f"Answer: **{gold}**"]


def completion(rng: random.Random, gold: int, slow_p: float) -> str:
    r = rng.random()
    if r < slow_p:
        return rng.choice(SLOW)
    if r < 0.40:
        return rng.choice(NO_ANSWER)
    if r < 0.60:
        return rng.choice(right_forms(gold))
    if r < 0.80:
        wrong = gold + rng.choice([-2, -1, 1, 2, 10, -gold])
        return rng.choice([f"\\boxed{{{wrong}}}", f"Answer: {wrong}", f"\\boxed{{{wrong}.5}}", f"\\boxed{{\\frac{{{wrong}}}{{3}}}}"])
    return rng.choice(GARBAGE)


def make_batch(rng: random.Random, round_index: int, slow_p: float) -> list[dict]:
    rows = []
    n_problems = rng.choice([1, 2, 2, 3, 4])
    for p in range(n_problems):
        a, b = rng.randint(1, 12), rng.randint(1, 12)
        gold_value = a + b
        gold = rng.choice([str(gold_value), str(gold_value), f"{gold_value}.0", f"\\frac{{{2 * gold_value}}}{{2}}"])
        group = rng.choice([1, 2, 4, 8])
        kind = rng.random()
        for s in range(group):
            if kind < 0.2:
                text = rng.choice(NO_ANSWER)  # a whole problem without any answer
            elif kind < 0.3 and s > 0:
                text = rows[-1]["completion"]  # duplicates
            else:
                text = completion(rng, gold_value, slow_p)
            rows.append({"problem_id": rng.choice([f"g{p}", p, f"{round_index}-{p}"]) if s == 0 else rows[-1]["problem_id"],
                         "gold": gold, "completion": text, "sample_idx": s})
    rng.shuffle(rows)
    return rows


def check(rows: list[dict], graded: list[dict]) -> None:
    assert len(rows) == len(graded)
    seen: dict = {}
    for row, out in zip(rows, graded):
        assert out["completion"] == row["completion"]
        assert out["status"] in STATUSES, out
        assert out["correct"] == (out["status"] == "correct"), out
        if out["extracted"] is None:
            assert out["answer_class"] is None and out["status"] in ("no_answer", "error"), out
        else:
            assert isinstance(out["answer_class"], int), out
        problem = seen.setdefault(str(out["problem_id"]), {"classes": [], "by_answer": {}, "correct": set()})
        if out["answer_class"] is not None:
            cls = out["answer_class"]
            if cls not in problem["classes"]:
                assert cls == len(problem["classes"]), f"class {cls} not numbered by first appearance"
                problem["classes"].append(cls)
            assert problem["by_answer"].setdefault(out["extracted"], cls) == cls, "equal answers, different classes"
            if out["correct"]:
                problem["correct"].add(cls)
    for problem in seen.values():
        assert len(problem["correct"]) <= 1, "correct answers split over classes"


def trainer_like_batches(rng: random.Random, n_steps: int, samples: list[str]) -> list[list[dict]]:
    """n_steps batches of 2 groups x 8 completions, problem ids g0/g1 as dsdr_train.scoring.grade
    sends them; completions drawn from real samples.jsonl rows when given, else synthetic."""
    by_problem: dict[str, list[dict]] = {}
    for path in samples:
        with open(path) as handle:
            for line in handle:
                row = json.loads(line)
                by_problem.setdefault(row["problem_id"], []).append(row)
    batches = []
    for step in range(n_steps):
        rows = []
        for g in range(2):
            if by_problem:
                source = by_problem[rng.choice(sorted(by_problem))]
                picked = [rng.choice(source) for _ in range(8)]
                rows += [{"problem_id": f"g{g}", "gold": s["gold"], "completion": s["completion"]} for s in picked]
            else:
                gold = rng.randint(2, 24)
                rows += [{"problem_id": f"g{g}", "gold": str(gold), "completion": completion(rng, gold, 0.0)}
                         for _ in range(8)]
        batches.append(rows)
    return batches


def step_timing(args: argparse.Namespace) -> int:
    batches = trainer_like_batches(random.Random(args.seed), args.rounds, args.samples)
    started = time.perf_counter()
    for rows in batches:
        grade_samples(rows, grading_timeout_s=5.0, workers=args.workers, progress=False)
    fresh = (time.perf_counter() - started) / len(batches)
    with GradingPool(grading_timeout_s=5.0, workers=args.workers) as pool:
        started = time.perf_counter()
        grade_samples(batches[0], progress=False, pool=pool)
        first = time.perf_counter() - started
        started = time.perf_counter()
        for rows in batches:
            grade_samples(rows, progress=False, pool=pool)
        pooled = (time.perf_counter() - started) / len(batches)
    source = ", ".join(args.samples) if args.samples else "synthetic completions (seeded)"
    print(f"{len(batches)} steps x 16 completions (2 problems x 8) from {source}; workers={args.workers}, "
          f"timeout 5 s, load avg {os.getloadavg()[0]:.1f}")
    print(f"fresh workers per call: {fresh:.3f} s/step; reused GradingPool: {pooled:.3f} s/step "
          f"(pool's first call incl. worker start-up {first:.2f} s); ratio {fresh / max(pooled, 1e-9):.0f}x")
    return 0


def slow_siblings(args: argparse.Namespace) -> int:
    """Wall time of one problem of n distinct slow answers, and of one killed answer (issue 24)."""
    over = 0
    with GradingPool(grading_timeout_s=args.timeout, workers=1) as pool:
        cases = [(f"{n} x (x+k)^300", [f"\\boxed{{(x+{k})^{{300}}}}" for k in range(1, n + 1)])
                 for n in args.slow_siblings]
        cases.append(("1 x 9!!!!!!!", ["\\boxed{9!!!!!!!}"]))
        for name, completions in cases:
            rows = [{"problem_id": "p", "gold": "204", "completion": c} for c in completions]
            started = time.perf_counter()
            graded = grade_samples(rows, progress=False, pool=pool)
            wall = time.perf_counter() - started
            bound = len(rows) * args.timeout
            over += wall > 1.1 * bound + 0.5  # a kill: the timeout, then SIGKILL and a fork
            statuses = {s: n for s, n in ((s, sum(r["status"] == s for r in graded)) for s in STATUSES) if n}
            print(f"{name}: {wall:.1f} s (bound n x timeout = {bound:.0f} s), {statuses}, "
                  f"{len({r['answer_class'] for r in graded})} classes, load avg {os.getloadavg()[0]:.1f}", flush=True)
    return 1 if over else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slow-p", type=float, default=0.01, help="chance of a slow hostile answer per sample")
    parser.add_argument("--step-timing", action="store_true", help="time trainer-like steps: fresh workers vs pool")
    parser.add_argument("--samples", nargs="*", default=[], help="samples.jsonl files to draw completions from")
    parser.add_argument("--slow-siblings", type=int, nargs="+", default=[], metavar="N",
                        help="time one problem of N distinct slow answers (and one killed answer)")
    args = parser.parse_args()
    if args.step_timing:
        return step_timing(args)
    if args.slow_siblings:
        return slow_siblings(args)
    rng = random.Random(args.seed)
    failures, statuses = 0, {s: 0 for s in STATUSES}
    started = time.perf_counter()
    pool = GradingPool(grading_timeout_s=args.timeout, workers=args.workers)
    try:
        for r in range(args.rounds):
            rows = make_batch(rng, r, args.slow_p)
            use_pool = r % 2 == 0
            try:
                graded = grade_samples(rows, grading_timeout_s=args.timeout, workers=args.workers, progress=False,
                                       pool=pool if use_pool else None)
                check(rows, graded)
                for out in graded:
                    statuses[out["status"]] += 1
            except Exception:  # noqa: BLE001 -- report every failure with its batch, keep going
                failures += 1
                print(f"round {r} ({'pool' if use_pool else 'fresh'}): FAILED on\n{rows!r}", file=sys.stderr)
                traceback.print_exc()
            if (r + 1) % 20 == 0:
                print(f"{r + 1}/{args.rounds} rounds, {failures} failures, {time.perf_counter() - started:.0f} s, "
                      f"pool respawns {pool.worker_pool.respawns if pool.worker_pool else '?'}", flush=True)
    finally:
        pool.close()
    print(f"rounds={args.rounds} seed={args.seed} timeout={args.timeout} workers={args.workers} "
          f"failures={failures} statuses={statuses} wall={time.perf_counter() - started:.1f}s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
