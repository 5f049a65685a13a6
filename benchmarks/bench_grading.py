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

Cold start on REAL completions (issue 16: a small file must not pay for the pool's start-up):
    python benchmarks/bench_grading.py --real OUTPUTS.jsonl [OUTPUTS2.jsonl ...] --sizes 800,8000 --repeats 3
reads model outputs in the Qwen2.5-Math / ToRA format (see bench_grader_agreement.py), takes the
first N completions (cycled, a later copy counted as another problem, when N exceeds the file)
and times, each in a FRESH interpreter, from process start to the last verdict: ``grade_samples``
(``--workers``) vs the naive serial loop (import math-verify, then parse+verify per sample). Runs
of the two sides are interleaved and the medians printed side by side with their ratio
(``--before-tree DIR`` adds the same grade_samples run importing an older checkout).
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
    """Serial parse+verify per sample -> (verdicts (None = math-verify timed out), total s, s spent on timeouts).

    Plain math-verify calls with ``raise_on_error=True``: a timeout is its ``TimeoutException``, any
    other error a parse of nothing / an unequal comparison."""
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    from dsdr_eval.grading import extract_answer

    def parsed(text: str) -> list:
        try:
            return parse(text, raise_on_error=True)
        except Exception:  # noqa: BLE001
            return []

    verdicts: list[bool | None] = []
    on_timeouts = 0.0
    start = time.perf_counter()
    for row in rows:
        sample_start = time.perf_counter()
        try:
            gold = parsed("\\boxed{" + row["gold"] + "}")
            if native:
                pred = parsed(row["completion"])
            else:
                answer = extract_answer(row["completion"])
                pred = parsed("\\boxed{" + answer + "}") if answer is not None else []
            try:
                ok: bool | None = bool(verify(gold, pred, raise_on_error=True)) if pred else False
            except Exception:  # noqa: BLE001
                ok = False
        except TimeoutException:
            ok = None
        verdicts.append(ok)
        if ok is None:
            on_timeouts += time.perf_counter() - sample_start
    return verdicts, time.perf_counter() - start, on_timeouts


def real_samples(paths: list[str], n: int) -> list[dict]:
    """The first ``n`` completions of the output files (cycled; copy k > 0 gets problem ids '#k')."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_grader_agreement import load_records, to_samples
    from pathlib import Path

    base: list[dict] = []
    for path in paths:
        records = load_records(Path(path))
        base += to_samples(records, Path(path).stem, "tora-numeric")[0]
    rows = []
    for i in range(n):
        row = dict(base[i % len(base)])
        if i >= len(base):
            row["problem_id"] = f"{row['problem_id']}#{i // len(base)}"
        rows.append(row)
    return rows


def _child(side: str, samples_path: str, out_path: str, workers: int, timeout: float) -> int:
    """One cold run (this interpreter was started for it): grade, write verdicts as JSON."""
    import json

    with open(samples_path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    if side == "ours":
        from dsdr_eval.grading import grade_samples

        graded = grade_samples(rows, grading_timeout_s=timeout, workers=workers, progress=False)
        verdicts = [None if g["status"] in ("timeout", "error") else g["correct"] for g in graded]
    else:
        verdicts = naive_grade(rows, native=False)[0]
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(verdicts, handle)
    return 0


def cold_start_comparison(args) -> int:
    import json
    import statistics
    import subprocess
    import tempfile

    sizes = [int(size) for size in args.sizes.split(",")]
    workers = args.workers or 2
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start (shared); "
          f"ours: grade_samples with {workers} workers, timeout {args.timeout:g} s")
    sides = ["naive", "ours"] + (["before"] if args.before_tree else [])
    times: dict[tuple[int, str], list[float]] = {(n, side): [] for n in sizes for side in sides}
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for n in sizes:
            files[n] = os.path.join(tmp, f"samples_{n}.jsonl")
            with open(files[n], "w", encoding="utf-8") as handle:
                for row in real_samples(args.real, n):
                    handle.write(json.dumps(row) + "\n")
        verdicts: dict[tuple[int, str], list] = {}
        for repeat in range(args.repeats):
            for n in sizes:
                order = sides if repeat % 2 == 0 else sides[::-1]
                for side in order:
                    out = os.path.join(tmp, f"verdicts_{n}_{side}.json")
                    env, cwd = dict(os.environ), None
                    if side == "before":  # the same grade_samples call, importing dsdr_eval from that tree
                        env["PYTHONPATH"] = cwd = os.path.abspath(args.before_tree)  # (workers import from cwd)
                    start = time.perf_counter()
                    subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                    "ours" if side == "before" else side, files[n], out,
                                    "--workers", str(workers), "--timeout", str(args.timeout)], check=True, env=env, cwd=cwd)
                    times[n, side].append(time.perf_counter() - start)
                    with open(out, encoding="utf-8") as handle:
                        verdicts[n, side] = json.load(handle)
    before_header = f" {'before s':>9} {'before':>7}" if args.before_tree else ""
    print(f"{'samples':>8} {'naive s':>9} {'ours s':>8} {'speed-up':>9}{before_header}  verdicts (where neither timed out)")
    for n in sizes:
        median = {side: statistics.median(times[n, side]) for side in sides}
        pairs = [(a, b) for a, b in zip(verdicts[n, "naive"], verdicts[n, "ours"]) if a is not None and b is not None]
        same = sum(a == b for a, b in pairs)
        before = (f" {median['before']:>9.2f} {median['naive'] / median['before']:>6.2f}x"
                  if args.before_tree else "")
        runs = ", ".join(f"{side} {[round(t, 2) for t in times[n, side]]}" for side in sides)
        print(f"{n:>8} {median['naive']:>9.2f} {median['ours']:>8.2f} {median['naive'] / median['ours']:>8.2f}x{before}"
              f"  identical {same}/{len(pairs)}   (runs {runs})")
    print(f"medians of {args.repeats} interleaved cold runs each; load average at end {os.getloadavg()[0]:.2f}")
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child = argparse.ArgumentParser(prog="bench_grading.py --child")
        child.add_argument("side", choices=("ours", "naive"))
        child.add_argument("samples")
        child.add_argument("out")
        child.add_argument("--workers", type=int, required=True)
        child.add_argument("--timeout", type=float, required=True)
        c = child.parse_args(sys.argv[2:])
        return _child(c.side, c.samples, c.out, c.workers, c.timeout)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=os.environ.get("DSDR_DATA_DIR", "../shared/data/benchmarks"))
    parser.add_argument("--problems", type=int, default=48, help="problems (mixed from math500/aime24/minerva/olympiadbench)")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--native", action="store_true", help="also time math-verify's own extraction (slow on long text)")
    parser.add_argument("--real", nargs="+", default=None, metavar="OUTPUTS.jsonl",
                        help="cold-start comparison on real completions from these files (see above)")
    parser.add_argument("--sizes", default="800,8000", help="with --real: sample counts")
    parser.add_argument("--repeats", type=int, default=3, help="with --real: interleaved cold runs per side")
    parser.add_argument("--before-tree", default=None, metavar="DIR",
                        help="with --real: also time grade_samples importing dsdr_eval from this checkout (e.g. "
                             "`git worktree`/`git archive` of the previous commit), interleaved: before vs after")
    args = parser.parse_args()
    if args.real:
        return cold_start_comparison(args)

    from dsdr_eval.tasks import load_benchmark
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
    graded = grade_samples(rows, grading_timeout_s=args.timeout, workers=workers, progress=False)
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
