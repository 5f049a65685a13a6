"""`make demo`: the product in about three minutes on 2 CPU cores.

    python examples/demo.py --data-dir DIR --examples reports/ablation_study/runs reports/ablation_study/design2/runs reports/ablation_study/design3/runs --out runs/demo

1. ``dsdr-eval run``: SmolLM2-135M-Instruct on a few MATH500 problems (protocol ``quick``, short
   max tokens so it fits the time; ``--backend auto`` picks the engine and says why), which
   grades, scores and computes the CPU diversity metrics; then ``dsdr-eval report`` on it.
2. A 135M model nearly always scores 0 on competition math. When it does, the demo says so and
   runs the same analysis (``score``, ``diversity``, ``report``) on real outputs that are not
   degenerate: the repo's multi-seed ablation study (reports/ablation_study, docs/ablation_study.md:
   SmolLM2 trained on CPU with GRPO, DAPO, DSDR, DSDR w/o GD, DSDR w/o GC and DARLING on a generated
   linear-equation task: design 1). The base model's and each arm's seed-0 final checkpoint's
   samples.jsonl are copied into the demo directory and re-scored from them.
3. Copies every training log of the three study designs (config.json and metrics.jsonl of each arm and
   seed, one line per step; design 2 = the easy addition task where DSDR's global term acts; design 3 =
   the pre-registered multiplication task where solutions can differ), so the
   dashboard's "Training dynamics" page has real curves to overlay.
4. Prints each design's precomputed claims table (t intervals over seeds, Holm-corrected) and copies
   its report page and plots (pass@k with CI bands, metric vs step, training dynamics).
5. Prints where the tables and plots are and the exact ``dsdr-dashboard`` commands to browse it all.

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
from typing import Any

DEMO_MODEL = "smollm2-135m"
DEMO_RUN = ["--benchmarks", "math500", "--limit", "4", "--protocol", "quick", "--max-tokens", "96"]
# the study's arms (reports/ablation_study/run.sh) and their labels in the report
ARMS = {"grpo": "GRPO", "dapo": "DAPO", "dsdr": "DSDR", "dsdr_wo_gd": "DSDR w/o GD", "dsdr_wo_gc": "DSDR w/o GC",
        "darling": "DARLING"}
BASE_LABEL = "SmolLM2-135M base"


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


def copy_runs(sources: dict[str, Path], out: Path, files: tuple[str, ...]) -> list[Path]:
    """``files`` of each run ``sources[name]`` into ``out/name`` (only those: everything else is
    recomputed here or not read)."""
    copies = []
    for name, source in sources.items():
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        for file in files:
            shutil.copyfile(source / file, target / file)
        copies.append(target)
    return copies


def study_eval_runs(study: Path) -> dict[str, tuple[Path, str]]:
    """Name -> (run directory, label): the study's base model and each arm's seed-0 last evaluated
    checkpoint (the sweep's last ``step_*`` with samples)."""
    runs = {"base": (study / "base", BASE_LABEL)}
    for arm, label in ARMS.items():
        steps = sorted(p for p in (study / arm / "s0" / "sweep").glob("step_*") if (p / "samples.jsonl").exists())
        if steps:
            runs[f"{arm}_s0"] = (steps[-1], f"{label} step {int(steps[-1].name[len('step_'):])}")
    return runs


def study_train_runs(study: Path) -> dict[str, Path]:
    """Name -> training run directory: every arm and seed of the study that logged a step."""
    return {f"{arm}_{seed.name}_train": seed / "train" for arm in ARMS
            for seed in sorted((study / arm).glob("s*")) if (seed / "train" / "metrics.jsonl").exists()}


def copy_example_runs(study: Path, out: Path) -> list[Path]:
    """Each study evaluation run's samples.jsonl and config.json (scored again here)."""
    return copy_runs({name: run for name, (run, _) in study_eval_runs(study).items()}, out,
                     ("samples.jsonl", "config.json"))


def copy_training_logs(study: Path, out: Path) -> list[Path]:
    """Each study training run's config.json and metrics.jsonl: all the dashboard reads of a training run."""
    return copy_runs(study_train_runs(study), out, ("config.json", "metrics.jsonl"))


def study_claims(study: Path) -> list[str]:
    """The study's precomputed verdicts (report/analysis.json, written by analyze.py), one line each."""
    rows = json.loads((study / "report" / "analysis.json").read_text())["claims"]

    def ci(r: dict) -> str:  # one seed: no interval (null in the JSON)
        lo, hi = r["ci95"]
        return "no interval" if lo is None else f"95% CI [{lo:+.3f}, {hi:+.3f}]"
    return [f"  {r['claim']}: {r['verdict']}" + (f" ({r['diff']:+.3f}, {ci(r)}, {r['seeds']} seeds)" if "diff" in r else "")
            for r in rows]


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


def example_analysis(out: Path, study: Path) -> Path:
    runs = copy_example_runs(study, out / "ablation_study")
    labels_by_name = {name: label for name, (_, label) in study_eval_runs(study).items()}
    for run_dir in runs:
        dsdr_eval(["score", str(run_dir), "--no-progress"])
        dsdr_eval(["diversity", str(run_dir), "--no-progress"])
    labels = [arg for run_dir in runs for arg in ("--label", labels_by_name[run_dir.name])]
    report = out / "report-ablation-study"
    baseline = labels_by_name.get("grpo_s0", BASE_LABEL)
    dsdr_eval(["report", *map(str, runs), *labels, "--out", str(report), "--baseline", baseline])
    print("\nPass@k and semantic diversity of the study's real outputs (seed 0):")
    for run_dir in runs:
        print_pass_at_k(run_dir / "metrics.json", labels_by_name[run_dir.name])
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
    parser.add_argument("--examples", nargs="+", default=["reports/ablation_study/runs",
                                                          "reports/ablation_study/design2/runs",
                                                          "reports/ablation_study/design3/runs"],
                        help="the ablation study's runs directories, one per design (base/, <arm>/s<seed>/{train,sweep}, "
                             "report/); the first one's evaluations are re-scored when the demo run is degenerate")
    args = parser.parse_args(argv)
    out, studies, t0 = Path(args.out), [Path(e) for e in args.examples], time.perf_counter()
    study = studies[0]
    use_one_thread_when_busy()
    run_dir, degenerate = smollm2_run(out, args.data_dir)
    reports = [out / "report-smollm2"]
    if degenerate:
        print(f"\nSmolLM2-135M-Instruct scored 0 on these MATH500 problems (every sample wrong: Pass@k = 0 for "
              "every k), as expected of a 135M model on competition math with short completions. The same "
              f"analysis on real outputs that are not degenerate: the repo's ablation study ({study}: SmolLM2 "
              "trained on CPU with six objectives, several seeds each, on a generated linear-equation task).")
        reports.append(example_analysis(out, study))
    study_reports = []
    for i, design in enumerate(studies, start=1):
        # design 1 keeps the directory names of one design (the dashboard tests and docs name them)
        suffix = "" if i == 1 else f"-design{i}"
        logs_dir = out / f"ablation_study{suffix.replace('-', '_')}"
        logs = copy_training_logs(design, logs_dir)
        print(f"\ntraining logs of the ablation study, design {i} ({design}; {len(logs)} runs, one metrics.jsonl "
              f"line per step): {logs_dir}/<arm>_s<seed>_train/")
        if not (design / "report" / "analysis.json").exists():
            print(f"design {i}: no analysis yet ({design}/report/analysis.json)")
            continue
        study_report = out / f"ablation-study-analysis{suffix}"
        shutil.copytree(design / "report", study_report, dirs_exist_ok=True)
        study_reports.append(study_report)
        print(f"\nDesign {i}'s claims (precomputed by reports/ablation_study/analyze.py; paired differences on the "
              "final checkpoint):")
        print("\n".join(study_claims(design)))
    print(f"\ndemo finished in {time.perf_counter() - t0:.0f}s")
    print(f"run: {run_dir}/ (config.json: every setting, backend.auto: why this backend; samples, graded, metrics, "
          "diversity)")
    for report in reports:
        print(f"report: {report_summary(report)}")
    for study_report in study_reports:
        print(f"study: {study_report}/analysis.md (claims, per-arm table, training dynamics) and its plots "
              f"{', '.join(sorted(p.name for p in study_report.glob('*.png')))}")
    print(f"browse it all:  dsdr-dashboard --runs {out}    (in the venv: . .venv/bin/activate)")
    for i, design in enumerate(studies, start=1):
        print(f"every seed and checkpoint of design {i}:  dsdr-dashboard --runs {design}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
