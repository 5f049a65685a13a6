"""`make demo`: the product in about three minutes on 2 CPU cores.

    python examples/demo.py --data-dir DIR --examples reports/mini_experiment/runs --out runs/demo

1. ``dsdr-eval run``: SmolLM2-135M-Instruct on a few MATH500 problems (protocol ``quick``, short
   max tokens so it fits the time; ``--backend auto`` picks the engine and says why), which
   grades, scores and computes the CPU diversity metrics; then ``dsdr-eval report`` on it.
2. A 135M model nearly always scores 0 on competition math. When it does, the demo says so and
   runs the same analysis (``score``, ``diversity``, ``report``) on real outputs that are not
   degenerate: the samples of the repo's own mini experiment (reports/mini_experiment: SmolLM2
   base vs GRPO vs DSDR checkpoints trained on CPU, few-shot addition, 48 held-out problems x
   (1 + 8) samples), copied into the demo directory and re-scored from their samples.jsonl.
3. Copies the mini experiment's two training logs (GRPO and DSDR: config.json and metrics.jsonl, one
   line per step) next to them, so the dashboard's "Training dynamics" page has real curves.
4. Prints where the tables and plots are and the exact ``dsdr-dashboard`` command to browse it all.

Every step is a real ``dsdr-eval`` command, printed before it runs, so each can be copied.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Iterable

DEMO_MODEL = "smollm2-135m"
DEMO_RUN = ["--benchmarks", "math500", "--limit", "4", "--protocol", "quick", "--max-tokens", "96"]
# reports/mini_experiment/runs/<dir> -> label in the report
EXAMPLE_RUNS = {"eval_base": "SmolLM2-135M base", "eval_grpo": "GRPO 44 steps", "eval_dsdr": "DSDR 44 steps"}
# the training runs that made the GRPO and DSDR checkpoints: the demo cannot train in its three minutes,
# and without them the dashboard's first page (training dynamics) would be empty
EXAMPLE_TRAIN_RUNS = ("train_grpo", "train_dsdr")


def dsdr_eval(argv: list[str]) -> None:
    """Run one ``dsdr-eval`` subcommand in this process (no second interpreter start), printed first."""
    from dsdr_eval.cli import main as cli_main

    print(f"\n$ dsdr-eval {shlex.join(argv)}", flush=True)
    code = cli_main(argv)
    if code != 0:
        raise SystemExit(f"demo: `dsdr-eval {argv[0]}` exited with {code}")


def is_degenerate(metrics: dict[str, Any]) -> bool:
    """True when no sample of any benchmark is correct (Avg@n and every Pass@k are 0)."""
    blocks = list((metrics.get("benchmarks") or {}).values())
    return all(not b.get("avg@n") and not any((b.get("pass@k") or {}).values()) for b in blocks)


def copy_runs(examples: Path, out: Path, names: Iterable[str], files: tuple[str, ...]) -> list[Path]:
    """``files`` of each example run ``names`` from ``examples`` into ``out`` (only those: everything else
    is recomputed here or not read)."""
    copies = []
    for name in names:
        source, target = examples / name, out / name
        target.mkdir(parents=True, exist_ok=True)
        for file in files:
            shutil.copyfile(source / file, target / file)
        copies.append(target)
    return copies


def copy_example_runs(examples: Path, out: Path) -> list[Path]:
    """Each example evaluation run's samples.jsonl and config.json (scored again here)."""
    return copy_runs(examples, out, EXAMPLE_RUNS, ("samples.jsonl", "config.json"))


def copy_training_logs(examples: Path, out: Path) -> list[Path]:
    """Each example training run's config.json and metrics.jsonl: all the dashboard reads of a training run."""
    return copy_runs(examples, out, EXAMPLE_TRAIN_RUNS, ("config.json", "metrics.jsonl"))


def report_summary(report_dir: Path) -> str:
    """The report's tables and plots, one line."""
    tables = sorted(p.name for p in report_dir.iterdir() if p.suffix in (".md", ".csv"))
    plots = sorted(p.name for p in (report_dir / "plots").glob("*.png")) if (report_dir / "plots").is_dir() else []
    return f"{report_dir}/: tables {', '.join(tables)}; plots/ {', '.join(plots) or '-'}"


def _number(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "-"


def print_pass_at_k(metrics_path: Path, label: str) -> None:
    """One line per benchmark: the Pass@k curve and the headline diversity numbers (all rollouts)."""
    for name, block in json.loads(metrics_path.read_text())["benchmarks"].items():
        curve = ", ".join(f"@{k} {100 * v:.1f}" for k, v in (block.get("pass@k") or {}).items())
        div = (block.get("diversity") or {}).get("all") or {}
        vendi = (div.get("vendi_embedding") or {}).get("1")
        print(f"  {label:>18} [{name}] Pass@k %: {curve} | diversity: d_emb {_number(div.get('d_emb'))}, "
              f"d {_number(div.get('d'))}, Vendi(q=1) {_number(vendi)}, answer classes {_number(div.get('n_classes'))}")


def smollm2_run(out: Path, data_dir: str | None) -> tuple[Path, bool]:
    run_dir = out / "smollm2-math500"
    data = ["--data-dir", data_dir] if data_dir else []
    dsdr_eval(["run", "--model", DEMO_MODEL, *DEMO_RUN, *data, "--out", str(run_dir), "--label",
               "SmolLM2-135M-Instruct (demo)", "--no-progress"])
    dsdr_eval(["report", str(run_dir), "--out", str(out / "report-smollm2"), "--no-compare"])
    return run_dir, is_degenerate(json.loads((run_dir / "metrics.json").read_text()))


def example_analysis(out: Path, examples: Path) -> Path:
    runs = copy_example_runs(examples, out / "mini_experiment")
    for run_dir in runs:
        dsdr_eval(["score", str(run_dir), "--no-progress"])
        dsdr_eval(["diversity", str(run_dir), "--no-progress"])
    labels = [arg for name in EXAMPLE_RUNS for arg in ("--label", EXAMPLE_RUNS[name])]
    report = out / "report-mini-experiment"
    dsdr_eval(["report", *map(str, runs), *labels, "--out", str(report), "--baseline", EXAMPLE_RUNS["eval_grpo"]])
    print("\nPass@k and semantic diversity of the real mini-experiment outputs:")
    for run_dir in runs:
        print_pass_at_k(run_dir / "metrics.json", EXAMPLE_RUNS[run_dir.name])
    return report


def use_one_thread_when_busy() -> None:
    """On cores already busy with other processes, torch's threads fight them and generation slows
    several-fold (measured here: ~2 vs ~16 tokens/s for SmolLM2 at load 4-8 on 2 cores); one thread
    then is faster. Set before torch is first imported; an explicit OMP_NUM_THREADS is kept."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if "OMP_NUM_THREADS" not in os.environ and load >= cores:
        os.environ["OMP_NUM_THREADS"] = "1"
        print(f"the {cores} cores are busy (load average {load:.1f}): OMP_NUM_THREADS=1 for this demo")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python examples/demo.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/demo", help="demo directory (default runs/demo; rerunning resumes)")
    parser.add_argument("--data-dir", default=None, help="benchmarks directory (default $DSDR_DATA_DIR)")
    parser.add_argument("--examples", default="reports/mini_experiment/runs",
                        help="the mini experiment's run directories (eval_base, eval_grpo, eval_dsdr)")
    args = parser.parse_args(argv)
    out, t0 = Path(args.out), time.perf_counter()
    use_one_thread_when_busy()
    run_dir, degenerate = smollm2_run(out, args.data_dir)
    reports = [out / "report-smollm2"]
    if degenerate:
        print(f"\nSmolLM2-135M-Instruct scored 0 on these MATH500 problems (every sample wrong: Pass@k = 0 for "
              "every k), as expected of a 135M model on competition math with short completions. The same "
              "analysis on real outputs that are not degenerate: the repo's mini experiment "
              f"({args.examples}: SmolLM2 base vs GRPO vs DSDR checkpoints trained on CPU, few-shot addition).")
        reports.append(example_analysis(out, Path(args.examples)))
    logs = copy_training_logs(Path(args.examples), out / "mini_experiment")
    print(f"\ntraining logs of the mini experiment (GRPO, DSDR; one metrics.jsonl line per step): "
          f"{', '.join(f'{p}/' for p in logs)}")
    print(f"\ndemo finished in {time.perf_counter() - t0:.0f}s")
    print(f"run: {run_dir}/ (config.json: every setting, backend.auto: why this backend; samples, graded, metrics, "
          "diversity)")
    for report in reports:
        print(f"report: {report_summary(report)}")
    print(f"browse it all:  dsdr-dashboard --runs {out}    (in the venv: . .venv/bin/activate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
