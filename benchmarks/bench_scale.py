"""A paper-scale run directory on one machine: wall time and peak memory of every stage, at several sizes.

Generates an evaluation run directory like ``dsdr-eval run`` writes at the paper's protocol (the five
Table 1 benchmarks, ``--samples`` rollouts per problem, long math-style completions of about
``--completion-bytes`` bytes ending in a boxed answer, right for some rollouts and wrong for others),
then runs each stage in a fresh subprocess and measures it:

* ``score``      ``dsdr-eval score RUN --workers 1`` (grading + metrics.json)
* ``diversity``  ``dsdr-eval diversity RUN`` (semantic D_emb with MiniLM, formula D_eq, the embedding
  partition, Vendi, lexical, answer diversity)
* ``report``     ``dsdr-eval report RUN --out REPORT``
* ``load_run``   ``dsdr_eval.rundir.results.load_run(RUN)`` (what report and the dashboard read)
* ``dashboard``  the dashboard's first page (``dashboards/app.py``, page "evaluation", through
  ``streamlit.testing.v1.AppTest``) on a runs directory holding this run

For each stage: wall seconds, the peak RSS of the stage's own process (``ru_maxrss``, exact), and the
peak of the sum over the process and its children (grading workers), polled every 100 ms. Then the
ratio of every figure between consecutive sizes, next to the ratio of the input sizes: a stage whose
memory ratio is near 1 is bounded, near the input ratio grows with the run.

The problems and gold answers come from ``$DSDR_DATA_DIR`` (default ``../shared/data/benchmarks``) when
the five files are there, else synthetic problems. Everything is seeded: the same arguments write the
same bytes.

Usage: python benchmarks/bench_scale.py [--sizes 1000,4000] [--samples 64] [--completion-bytes 8192]
       [--stages score,diversity,report,load_run,dashboard] [--work DIR] [--keep] [--out FILE.json]
       python benchmarks/bench_scale.py --generate-only DIR --sizes N   (just write the run directory)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = ("aime24", "aime25", "math500", "minerva", "olympiadbench")  # the paper's Table 1
STAGES = ("score", "diversity", "report", "load_run", "dashboard")

SENTENCES = (
    "First we rewrite the expression so that the common factor is visible.",
    "Substituting the value back into the original equation gives",
    "By the AM-GM inequality we obtain",
    "Let us consider the cases separately, starting with the smallest one.",
    "Therefore the required quantity equals",
    "We can check this with a small example before continuing.",
    "Squaring both sides and simplifying yields",
    "Note that the function is increasing on this interval, hence",
    "Using Vieta's formulas for the roots we have",
    "Counting the arrangements one by one we get",
    "Wait, let me double-check the previous step, since a sign may be wrong.",
    "Hmm, that does not match; let me try a different approach.",
    "Taking the derivative and setting it equal to zero,",
    "So the total number of valid configurations is",
)


# ----------------------------------------------------------------------------- the run directory

def load_problems(data_dir: Path | None) -> list[tuple[str, str, str, str]]:
    """(benchmark, problem_id, problem, gold) of the five benchmarks, interleaved so that any prefix holds
    all five; synthetic problems when the data files are absent."""
    per_benchmark: list[list[tuple[str, str, str, str]]] = []
    for name in BENCHMARKS:
        path = data_dir / f"{name}.jsonl" if data_dir else None
        rows = []
        if path is not None and path.is_file():
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
                row = json.loads(line)
                rows.append((name, str(row.get("id", i)), str(row.get("problem", "")), str(row.get("answer"))))
        else:
            rows = [(name, str(i), f"Synthetic problem {i} of {name}: compute $x$.", str(7 * i + 3)) for i in range(500)]
        per_benchmark.append(rows)
    out = []
    for i in range(max(len(rows) for rows in per_benchmark)):
        out += [rows[i] for rows in per_benchmark if i < len(rows)]
    return out


def completion(rng: random.Random, problem_seed: int, gold: str, right: bool, target_bytes: int) -> str:
    """A long reasoning-style solution: prose with inline and display formulas (some shared by the
    problem's rollouts), then a boxed answer (the gold when ``right``)."""
    local = random.Random(problem_seed)
    shared = [f"x^{local.randint(2, 5)} + {local.randint(1, 9)}x = {local.randint(10, 99)}" for _ in range(8)]
    parts: list[str] = []
    size = 0
    while size < target_bytes:
        sentence = SENTENCES[rng.randrange(len(SENTENCES))]
        formula = (shared[rng.randrange(len(shared))] if rng.random() < 0.6 else
                   f"\\frac{{{rng.randint(1, 50)}}}{{{rng.randint(2, 60)}}} + {rng.randint(0, 9)}y_{rng.randint(1, 99)}")
        shape = rng.randrange(4)
        piece = f"{sentence} " + (f"${formula}$." if shape == 0 else f"\\[ {formula} \\]" if shape == 1 else
                                  f"$$ {formula} $$" if shape == 2 else f"\\( {formula} \\), and")
        parts.append(piece)
        size += len(piece) + 1
    wrong = str(rng.randint(0, 999))
    if wrong == gold:
        wrong += "1"
    return "\n".join(parts) + f"\n\nTherefore the final answer is $\\boxed{{{gold if right else wrong}}}$."


def write_run(run_dir: Path, n_samples: int, samples_per_problem: int, completion_bytes: int,
              data_dir: Path | None, seed: int = 0) -> dict:
    """samples.jsonl + config.json of a run of ``n_samples`` rollouts; returns its sizes."""
    problems = load_problems(data_dir)
    n_problems = max(1, n_samples // samples_per_problem)
    if n_problems > len(problems):
        raise SystemExit(f"at most {len(problems) * samples_per_problem} samples with these problems")
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    with (run_dir / "samples.jsonl").open("w", encoding="utf-8") as fh:
        for p, (benchmark, problem_id, problem, gold) in enumerate(problems[:n_problems]):
            accuracy = rng.random()  # how hard this problem is for the model
            for idx in range(samples_per_problem):
                text = completion(rng, seed * 1_000_003 + p, gold, rng.random() < accuracy, completion_bytes)
                fh.write(json.dumps({
                    "benchmark": benchmark, "problem_id": problem_id, "sample_idx": idx, "phase": "sampling",
                    "problem": problem, "gold": gold, "prompt": problem + "\nPut the final answer in \\boxed{}.",
                    "completion": text, "finish_reason": "stop", "n_prompt_tokens": 120,
                    "n_completion_tokens": len(text) // 4, "temperature": 0.6, "top_p": 0.95,
                    "max_tokens": 32768, "seed": idx}) + "\n")
    config = {"kind": "eval", "label": f"scale-{n_samples}",
              "model": {"spec": "synthetic", "path": None, "is_local": False, "fingerprint": "synthetic"},
              "backend": {"name": "synthetic", "version": "0"},
              "protocol": {"name": "paper", "phases": [{"phase": "sampling", "n": samples_per_problem,
                                                        "temperature": 0.6, "top_p": 0.95}],
                           "max_tokens": 32768, "seed": seed},
              "template": {"name": "synthetic", "text": "{problem}", "chat": False},
              "benchmarks": [{"name": name} for name in BENCHMARKS]}
    (run_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    size = (run_dir / "samples.jsonl").stat().st_size
    return {"n_samples": n_problems * samples_per_problem, "n_problems": n_problems, "samples_bytes": size}


# ----------------------------------------------------------------------------- one stage, measured

def stage_command(stage: str, run_dir: Path, work: Path) -> list[str]:
    """The stage as a fresh interpreter running ``--_child``: it reports its own ru_maxrss when done."""
    return [sys.executable, str(Path(__file__).resolve()), "--_child", stage, str(run_dir), str(work)]


def child(stage: str, run_dir: Path, work: Path) -> None:
    """Run one stage in this process, then print its peak RSS (self and waited-for children) as JSON."""
    started = time.perf_counter()
    if stage in ("score", "diversity", "report"):
        from dsdr_eval.cli import main

        argv = {"score": ["score", str(run_dir), "--workers", "1", "--no-progress"],
                "diversity": ["diversity", str(run_dir), "--no-progress"],
                "report": ["report", str(run_dir), "--out", str(work / "report")]}[stage]
        code = main(argv)
        if code:
            raise SystemExit(code)
    elif stage == "load_run":
        from dsdr_eval.rundir.results import load_run

        load_run(run_dir)
    elif stage == "dashboard":
        from streamlit.testing.v1 import AppTest

        os.environ["DSDR_RUNS_DIR"] = str(run_dir.parent)
        app = AppTest.from_file(str(REPO / "dashboards" / "app.py"), default_timeout=600)
        app.query_params["page"] = "evaluation"
        app.run()
        if app.exception:
            raise SystemExit(f"dashboard: {[e.value for e in app.exception]}")
        if not any("Table 1" in str(e.value) or "Protocol" in str(e.value) for e in app.get("subheader")):
            raise SystemExit("dashboard: the evaluation page shows no results")
    else:
        raise SystemExit(f"unknown stage {stage}")
    usage_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    usage_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print("BENCH_SCALE " + json.dumps({"in_process_s": time.perf_counter() - started,
                                       "self_maxrss_kb": usage_self, "children_maxrss_kb": usage_children}))


def tree_rss(pid: int) -> int:
    """RSS in bytes of ``pid`` and all its descendants (0 when it is gone)."""
    import psutil

    try:
        process = psutil.Process(pid)
        members = [process, *process.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for member in members:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            pass
    return total


def measure(stage: str, run_dir: Path, work: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    started = time.perf_counter()
    process = subprocess.Popen(stage_command(stage, run_dir, work), env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    peak = 0
    while process.poll() is None:
        peak = max(peak, tree_rss(process.pid))
        time.sleep(0.1)
    out, err = process.communicate()
    wall = time.perf_counter() - started
    if process.returncode:
        raise SystemExit(f"{stage} failed (exit {process.returncode}):\n{err[-3000:]}")
    line = next(l for l in out.splitlines() if l.startswith("BENCH_SCALE "))
    record = json.loads(line[len("BENCH_SCALE "):])
    return {"wall_s": round(wall, 2), "in_process_s": round(record["in_process_s"], 2),
            "peak_rss_mb": round(record["self_maxrss_kb"] / 1024, 1),
            "children_peak_rss_mb": round(record["children_maxrss_kb"] / 1024, 1),
            "tree_peak_rss_mb": round(peak / 2**20, 1)}


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_child"]:
        child(argv[1], Path(argv[2]), Path(argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,4000", help="samples per run, comma-separated (ascending)")
    parser.add_argument("--samples", type=int, default=64, help="rollouts per problem")
    parser.add_argument("--completion-bytes", type=int, default=8192, help="approximate bytes per completion")
    parser.add_argument("--stages", default=",".join(STAGES),
                        help=f"comma-separated subset of {','.join(STAGES)}, run in the order given (every stage after "
                             "score reads what score writes)")
    parser.add_argument("--work", default=None, help="where the run directories go (default: a temp directory)")
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    parser.add_argument("--out", default=None, help="also write the figures to this JSON file")
    parser.add_argument("--reuse", action="store_true",
                        help="measure the run directories a kept invocation left in --work (same sizes and "
                             "--completion-bytes) instead of writing them again: a 2 GB run takes minutes to write")
    parser.add_argument("--generate-only", default=None, metavar="DIR",
                        help="write the run directory of the first size into DIR and stop")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    stages = [s for s in args.stages.split(",") if s]
    unknown = set(stages) - set(STAGES)
    if unknown:
        parser.error(f"unknown stages: {', '.join(sorted(unknown))}")
    data = Path(os.environ.get("DSDR_DATA_DIR") or REPO.parent / "shared" / "data" / "benchmarks")
    data_dir = data if all((data / f"{b}.jsonl").is_file() for b in BENCHMARKS) else None
    if args.reuse and not args.work:
        parser.error("--reuse needs --work (the directory a --keep invocation wrote)")
    if args.generate_only:
        print(json.dumps(write_run(Path(args.generate_only), sizes[0], args.samples, args.completion_bytes, data_dir)))
        return 0

    work = Path(args.work or tempfile.mkdtemp(prefix="dsdr_scale_"))
    results = []
    try:
        for size in sizes:
            base = work / f"n{size}"
            run_dir = base / "runs" / "run"
            started = time.perf_counter()
            if args.reuse and (run_dir / "samples.jsonl").is_file():
                n_problems = max(1, size // args.samples)
                info = {"n_samples": n_problems * args.samples, "n_problems": n_problems,
                        "samples_bytes": (run_dir / "samples.jsonl").stat().st_size, "reused": True}
            else:
                shutil.rmtree(base, ignore_errors=True)
                info = write_run(run_dir, size, args.samples, args.completion_bytes, data_dir)
            info["generate_s"] = round(time.perf_counter() - started, 2)
            print(f"# {info['n_samples']} samples ({info['n_problems']} problems, "
                  f"{info['samples_bytes'] / 2**20:.1f} MB samples.jsonl)", flush=True)
            figures = {}
            for stage in stages:
                figures[stage] = measure(stage, run_dir, base)
                files = {name: round(p.stat().st_size / 2**20, 1) for name in ("graded.jsonl", "diversity_per_sample.jsonl")
                         if (p := run_dir / name).is_file()}
                print(f"  {stage:10s} {figures[stage]['wall_s']:8.1f} s  peak RSS {figures[stage]['peak_rss_mb']:7.1f} MB"
                      f"  (with children {figures[stage]['tree_peak_rss_mb']:7.1f} MB)  files MB {files}", flush=True)
            results.append({"size": info, "stages": figures})
            if not args.keep:
                shutil.rmtree(base, ignore_errors=True)
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)

    print("\n# growth between consecutive sizes (input ratio vs each stage's time and memory ratio)")
    for before, after in zip(results, results[1:]):
        ratio = after["size"]["samples_bytes"] / before["size"]["samples_bytes"]
        print(f"{before['size']['n_samples']} -> {after['size']['n_samples']} samples: input x{ratio:.2f}")
        for stage in stages:
            a, b = before["stages"][stage], after["stages"][stage]
            print(f"  {stage:10s} time x{b['wall_s'] / a['wall_s']:.2f}  peak RSS x{b['peak_rss_mb'] / a['peak_rss_mb']:.2f}"
                  f"  (+{b['peak_rss_mb'] - a['peak_rss_mb']:.0f} MB)")
    if args.out:
        Path(args.out).write_text(json.dumps({"completion_bytes": args.completion_bytes, "samples": args.samples,
                                              "results": results}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
