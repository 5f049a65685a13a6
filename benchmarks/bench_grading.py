"""Grading throughput: dsdr_eval.grading.grade_samples vs a naive serial math-verify loop.

The input is generated deterministically from real benchmark gold answers: 64 samples per
problem with correct answers in several equivalent forms, wrong answers (a few recurring
distractors, as real samples have), no-answer (truncated) completions and long derivations.

Baselines, both over exactly the same samples:
  * naive  -- for every sample: parse(\\boxed{gold}), parse(\\boxed{extract_answer(completion)}),
              verify(...), serially in this process with math-verify's own timeouts. Same
              extraction rule, so verdicts must agree wherever neither side timed out.
  * native -- (informational, --native) math-verify's own extraction on the whole completion:
              parse(completion). Its verdicts may differ where its extraction rules differ.

Usage: python benchmarks/bench_grading.py [--data-dir DIR] [--problems 48] [--samples 64]
The machine is shared (2 cores, other jobs running): the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time

FILLER = [
    "We first simplify the expression and collect like terms.",
    "Substituting the values from the previous step gives a linear equation.",
    "Checking the boundary cases shows that none of them violates the constraint.",
    "By symmetry it suffices to consider the case where the first variable is the largest.",
    "Applying the formula once more and simplifying the fraction, we obtain the value below.",
    "Let me double-check this computation by plugging the result back into the original equation.",
]


def equivalent_forms(gold: str) -> list[str]:
    """The gold answer written in ways math-verify should accept as equal."""
    forms = [gold]
    if re.fullmatch(r"-?\d+", gold):
        forms += [f"{gold}.0", f"{int(gold):,}" if abs(int(gold)) >= 1000 else f"+{gold}" if int(gold) > 0 else f"{gold}.00"]
    frac = re.fullmatch(r"\\[dt]?frac\{(-?\d+)\}\{(\d+)\}", gold)
    if frac:
        forms += [f"{frac.group(1)}/{frac.group(2)}", f"\\dfrac{{{frac.group(1)}}}{{{frac.group(2)}}}"]
    if "\\frac" in gold and not frac:
        forms.append(gold.replace("\\frac", "\\dfrac"))
    forms.append(gold.replace(" ", "") if " " in gold else f" {gold} ")
    return forms


def wrong_answers(gold: str, rng: random.Random) -> list[str]:
    if re.fullmatch(r"-?\d+", gold):
        g = int(gold)
        return [str(g + 1), str(g - 1), str(2 * g), str(g + 10), str(rng.randint(0, 999))]
    return [f"{gold}+1", f"2\\left({gold}\\right)", f"-\\left({gold}\\right)", "0", "\\frac{1}{2}"]


def derivation(rng: random.Random, problem: str, long: bool) -> str:
    steps = [rng.choice(FILLER) for _ in range(rng.randint(3, 8))]
    if long:  # a rambling 20-60 KB chain of thought
        steps += [rng.choice(FILLER) + f" (step {i})" for i in range(rng.randint(250, 700))]
    return "Let's solve: " + problem[:200] + "\n\n" + "\n".join(steps)


def make_samples(problems, n_samples: int, seed: int) -> list[dict]:
    rows = []
    for p_index, problem in enumerate(problems):
        rng = random.Random(seed * 1_000_003 + p_index)
        correct_forms = equivalent_forms(problem.answer)
        wrong = wrong_answers(problem.answer, rng)
        p_correct = rng.uniform(0.1, 0.9)
        for s in range(n_samples):
            u = rng.random()
            long = rng.random() < 0.1
            text = derivation(rng, problem.problem, long)
            if u < 0.08:
                text += " and then"  # truncated at max_tokens: no final answer
            else:
                if rng.random() < p_correct:
                    answer = correct_forms[min(int(rng.expovariate(1.2)), len(correct_forms) - 1)]
                else:
                    answer = wrong[min(int(rng.expovariate(0.9)), len(wrong) - 1)]
                style = rng.random()
                if style < 0.8:
                    text += f"\n\nTherefore the answer is $\\boxed{{{answer}}}$."
                elif style < 0.9:
                    text += f"\n\nThe final answer is ${answer}$. I hope it is correct."
                else:
                    text += f"\n\nAnswer: {answer}"
            rows.append({"benchmark": problem.benchmark, "problem_id": problem.id, "sample_idx": s,
                         "gold": problem.answer, "completion": text})
    return rows


def naive_grade(rows, native: bool) -> tuple[list[bool | None], float, float]:
    """Serial parse+verify per sample -> (verdicts (None = math-verify timed out), total s, s spent on timeouts)."""
    import logging

    from math_verify import parse, verify

    from dsdr_eval.grading import extract_answer

    timed_out = {"flag": False}

    class Flag(logging.Handler):
        def emit(self, record):
            if str(record.msg).startswith("Timeout"):
                timed_out["flag"] = True

    logger = logging.getLogger("math_verify")
    logger.addHandler(Flag())
    logger.propagate = False
    verdicts: list[bool | None] = []
    on_timeouts = 0.0
    start = time.perf_counter()
    for row in rows:
        timed_out["flag"] = False
        sample_start = time.perf_counter()
        gold = parse("\\boxed{" + row["gold"] + "}")
        if native:
            pred = parse(row["completion"])
        else:
            answer = extract_answer(row["completion"])
            pred = parse("\\boxed{" + answer + "}") if answer is not None else []
        ok = bool(verify(gold, pred)) if pred else False
        verdicts.append(None if (timed_out["flag"] and not ok) else ok)
        if verdicts[-1] is None:
            on_timeouts += time.perf_counter() - sample_start
    return verdicts, time.perf_counter() - start, on_timeouts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=os.environ.get("DSDR_DATA_DIR", "../shared/data/benchmarks"))
    parser.add_argument("--problems", type=int, default=48, help="problems (mixed from math500/aime24/minerva/olympiadbench)")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--native", action="store_true", help="also time math-verify's own extraction (slow on long text)")
    args = parser.parse_args()

    from dsdr_eval.benchmarks import load_benchmark
    from dsdr_eval.grading import default_workers, grade_samples

    per = max(1, args.problems // 4)
    problems = []
    for name in ("math500", "aime24", "minerva", "olympiadbench"):
        problems += load_benchmark(name, data_dir=args.data_dir, limit=per, subset_seed=args.seed)
    rows = make_samples(problems, args.samples, args.seed)
    unique = len({(r["problem_id"], r["completion"][-120:]) for r in rows})
    size_mb = sum(len(r["completion"]) for r in rows) / 1e6
    print(f"input: {len(problems)} problems x {args.samples} samples = {len(rows)} completions, "
          f"{size_mb:.1f} MB of text, ~{unique} distinct answer endings; seed {args.seed}")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start (shared)")

    workers = args.workers or default_workers()
    start = time.perf_counter()
    graded = grade_samples(rows, timeout_s=args.timeout, workers=workers, progress=False)
    fast_s = time.perf_counter() - start
    print(f"grade_samples ({workers} workers, incl. worker start-up): {fast_s:.1f} s "
          f"({len(rows) / fast_s:.0f} samples/s)")

    naive, naive_s, naive_timeout_s = naive_grade(rows, native=False)
    print(f"naive serial parse+verify loop: {naive_s:.1f} s ({len(rows) / naive_s:.0f} samples/s), of which "
          f"{naive_timeout_s:.1f} s on the {sum(v is None for v in naive)} samples where math-verify timed out")
    print(f"SPEED-UP: {naive_s / fast_s:.1f}x")
    both = [(g, v) for g, v in zip(graded, naive) if v is not None and g["status"] not in ("timeout", "error")]
    agree = sum(g["correct"] == v for g, v in both)
    print(f"verdict agreement where both finished: {agree}/{len(both)} "
          f"({len(rows) - len(both)} excluded: timeouts/errors)")
    for g, v in [(g, v) for g, v in both if g["correct"] != v][:10]:
        print(f"  DISAGREE {g['problem_id']}: gold={g['gold']!r} extracted={g['extracted']!r} fast={g['correct']} naive={v}")
    statuses = {}
    for g in graded:
        statuses[g["status"]] = statuses.get(g["status"], 0) + 1
    print(f"statuses: {statuses}; load average at end {os.getloadavg()[0]:.2f}")

    if args.native:
        native, native_s, _ = naive_grade(rows, native=True)
        both = [(g, v) for g, v in zip(graded, native) if v is not None]
        agree = sum(g["correct"] == v for g, v in both)
        print(f"native math-verify parse(completion) loop: {native_s:.1f} s -> {native_s / fast_s:.1f}x; "
              f"agreement with our extraction {agree}/{len(both)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
