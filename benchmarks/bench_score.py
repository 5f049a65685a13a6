"""`dsdr-eval score` of this tree beside an earlier commit's and a naive serial math-verify loop.

A guard against slowdowns (issue 44): the same samples are scored, each run in a fresh process from
process start to exit, by

  * naive -- ``bench_grading.py --child naive``: for every sample parse(\\boxed{gold}),
             parse(\\boxed{answer}), verify, serially, math-verify's own timeouts (the baseline);
  * ref   -- ``python -m dsdr_eval.cli score`` of ``--ref`` (a git commit, exported with
             ``git archive`` into a temporary directory; default: the previous landing, see below);
  * this  -- ``python -m dsdr_eval.cli score`` of this checkout,

alternating the order of the sides from one repeat to the next, and prints the medians, the spread
(min-max) and the ratios naive/ref, naive/this and ref/this, in wall seconds and, where ``perf`` is
installed, in CPU seconds of the whole process tree (``perf stat -e task-clock``: the grading workers
included; less sensitive than wall time to the other jobs on a shared machine). It also checks that
ref and this give identical verdicts (graded.jsonl's statuses).

Default ``--ref``: on a branch, the commit it branched from main (``git merge-base HEAD main``); on
main itself, the first parent of HEAD (the previous landing).

Input: ``--real`` model outputs in Qwen2.5-Math's math_eval.py format (one JSON object a line with
``idx``, ``gt`` -- or ``answer`` where ``gt`` is empty -- and ``code``, the list of completions), e.g.
the Qwen2.5-Math-7B outputs of NovaSky-AI/SkyThought f7bcf0b
(``skythought/Qwen2.5-Math/evaluation/outputs/Qwen/Qwen2.5-Math-7B/<bench>_eval/<bench>/test_qwen25-math-cot_-1_seed0_t0.0_s0_e-1.jsonl``
for math500, minerva_math and aime24: 802 completions); the first N completions are taken, cycled,
a later copy getting distinct problem ids (``<id>#k``), so 8,000 is 800 real completions 10 times.

Usage:
    python benchmarks/bench_score.py --real math500.jsonl minerva_math.jsonl aime24.jsonl \\
        --sizes 800,8000 --repeats 3 [--ref COMMIT] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def real_rows(paths: list[str], n: int) -> list[dict]:
    """The first ``n`` completions of the files, cycled; copy k > 0 gets problem ids ``<id>#k``."""
    base: list[dict] = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    continue
                record = json.loads(line)
                gold = str(record.get("gt") or "").strip() or str(record.get("answer") or "")
                completions = record["code"] if isinstance(record["code"], list) else [record["code"]]
                for j, completion in enumerate(completions):
                    base.append({"benchmark": Path(path).stem, "problem_id": str(record["idx"]), "sample_idx": j,
                                 "gold": gold, "completion": completion})
    rows = []
    for i in range(n):
        row = dict(base[i % len(base)])
        if i >= len(base):
            row["problem_id"] = f"{row['problem_id']}#{i // len(base)}"
        rows.append(row)
    return rows


def default_ref() -> str:
    """The commit this tree is compared with: the branch point from main, or main's previous landing."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "HEAD")
    try:
        base = git("merge-base", "HEAD", "main")
    except subprocess.CalledProcessError:
        base = head
    return git("rev-parse", "HEAD^1") if base == head else base


def export_tree(ref: str, into: Path) -> str:
    """``git archive`` of ``ref`` into ``into`` -> the full commit id (no worktree left behind)."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", ref], check=True, capture_output=True,
                            text=True).stdout.strip()
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    archive.wait()
    return commit


def timed(command: list[str], cwd: Path, tmp: Path) -> tuple[float, float | None]:
    """Run ``command`` (in ``cwd``, importing dsdr_eval from there) -> (wall s, CPU s of its tree or None)."""
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    perf = shutil.which("perf")
    stat = tmp / "perf.txt"
    full = [perf, "stat", "-x", ",", "-e", "task-clock", "-o", str(stat), *command] if perf else command
    started = time.perf_counter()
    subprocess.run(full, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - started
    cpu = None
    if perf and stat.is_file():
        for line in stat.read_text().splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[2].startswith("task-clock") and fields[0].replace(".", "").isdigit():
                cpu = float(fields[0]) / 1000
    return wall, cpu


def statuses(graded: Path) -> list[str]:
    with graded.open(encoding="utf-8") as handle:
        return [json.loads(line)["status"] for line in handle]


def run_side(side: str, samples: Path, trees: dict[str, Path], tmp: Path, args) -> tuple[float, float | None, list]:
    out = tmp / f"out-{side}"
    shutil.rmtree(out, ignore_errors=True)
    if side == "naive":
        verdicts = tmp / "naive.json"
        command = [sys.executable, str(REPO / "benchmarks" / "bench_grading.py"), "--child", "naive", str(samples),
                   str(verdicts), "--workers", "1", "--timeout", str(args.timeout)]
        wall, cpu = timed(command, REPO, tmp)
        return wall, cpu, json.loads(verdicts.read_text())
    command = [sys.executable, "-m", "dsdr_eval.cli", "score", str(samples), "--out", str(out), "--no-progress",
               "--workers", str(args.workers), "--timeout", str(args.timeout)]
    wall, cpu = timed(command, trees[side], tmp)
    return wall, cpu, statuses(out / "graded.jsonl")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def report(n: int, times: dict, cpus: dict, verdicts: dict, sides: list[str]) -> None:
    median = {side: statistics.median(times[n, side]) for side in sides}
    same = sum(a == b for a, b in zip(verdicts[n, "ref"], verdicts[n, "this"]))
    print(f"\n{n} samples: wall s median [min-max] of {len(times[n, sides[0]])} runs: "
          + ", ".join(f"{side} {spread(times[n, side])}" for side in sides))
    if all(cpu is not None for side in sides for cpu in cpus[n, side]):
        print(f"{n} samples: CPU s of the process tree: " + ", ".join(f"{side} {spread(cpus[n, side])}" for side in sides))
        cpu = {side: statistics.median(cpus[n, side]) for side in sides}
        print(f"{n} samples: CPU ratios: naive/ref {cpu['naive'] / cpu['ref']:.2f}x, naive/this "
              f"{cpu['naive'] / cpu['this']:.2f}x, ref/this {cpu['ref'] / cpu['this']:.2f}x")
    print(f"{n} samples: WALL RATIOS: naive/ref {median['naive'] / median['ref']:.2f}x, naive/this "
          f"{median['naive'] / median['this']:.2f}x, ref/this {median['ref'] / median['this']:.2f}x "
          f"(> 1: this is faster); ref and this verdicts identical {same}/{len(verdicts[n, 'this'])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--real", nargs="+", required=True, metavar="OUTPUTS.jsonl",
                        help="Qwen2.5-Math math_eval.py output files (see above)")
    parser.add_argument("--sizes", default="800,8000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ref", default=None, help="the commit to compare with (default: see above)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--this", default=None, metavar="COMMIT",
                        help="score this commit (exported like --ref) instead of the working tree")
    parser.add_argument("--no-naive", action="store_true", help="only ref vs this")
    args = parser.parse_args()
    ref = args.ref or default_ref()
    sides = (["ref", "this"] if args.no_naive else ["naive", "ref", "this"])
    sizes = [int(size) for size in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-score-") as name:
        tmp = Path(name)
        (tmp / "ref").mkdir()
        commit = export_tree(ref, tmp / "ref")
        trees = {"ref": tmp / "ref", "this": REPO}
        this = f"the working tree {REPO.name}"
        if args.this:
            (tmp / "this").mkdir()
            trees["this"] = tmp / "this"
            this = f"{export_tree(args.this, tmp / 'this')[:10]} ({args.this})"
        print(f"ref {commit[:10]} ({ref}) vs this {this}; {args.workers} workers, timeout {args.timeout:g} s; "
              f"{os.cpu_count()} CPUs; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at start")
        files = {}
        for n in sizes:
            files[n] = tmp / f"samples_{n}.jsonl"
            with files[n].open("w", encoding="utf-8") as handle:
                for row in real_rows(args.real, n):
                    handle.write(json.dumps(row) + "\n")
        times = {(n, side): [] for n in sizes for side in sides}
        cpus = {(n, side): [] for n in sizes for side in sides}
        verdicts: dict = {}
        for repeat in range(args.repeats):
            for n in sizes:
                for side in (sides if repeat % 2 == 0 else sides[::-1]):
                    wall, cpu, verdicts[n, side] = run_side(side, files[n], trees, tmp, args)
                    times[n, side].append(wall)
                    cpus[n, side].append(cpu)
                    print(f"  run {repeat + 1} {n:>6} {side:>5}: {wall:7.2f} s wall"
                          + (f", {cpu:7.2f} s CPU" if cpu else "") + f"  (load {os.getloadavg()[0]:.2f})", flush=True)
        for n in sizes:
            report(n, times, cpus, verdicts, sides)
        print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
