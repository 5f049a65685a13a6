"""Assemble a report directory from evaluation runs: tables, plots, paired comparisons, provenance.

Output (``--out reports/NAME``)::

    README.md             the report: command, protocol of every run, tables, figures, comparisons,
                          what was skipped and why
    table1.md/.tex/.csv   Table 1 layout (Markdown, LaTeX booktabs, CSV with the 95% CIs)
    passk.csv             Pass@k per run x benchmark x k (+ CI)
    diversity.csv         diversity per run x benchmark x measure x subset   (when present)
    judge.csv             judge scores per run x benchmark                   (when present)
    judge_grading.csv     symbolic vs judge verdicts per run x benchmark     (when `score --judge-grading` ran)
    comparison.csv        paired bootstrap differences                      (two or more runs)
    plots/*.png, *.svg    figures
    report.json           the same content, machine-readable (and the list of files written)
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.errors import DsdrError
from dsdr_eval.options.commands import ReportOptions
from dsdr_eval.rundir.jsonl import read_json, write_json
from dsdr_eval.reporting import compare, plots, reference, tables
from dsdr_eval.reporting.readme import ReportContent, render_readme
from dsdr_eval.reporting.runs import TrainRun, load_train_run, protocol_differences, protocol_notes
from dsdr_eval.rundir.budget_curves import budget_curve_records
from dsdr_eval.rundir.records import diversity_records, judge_grading_records, judge_records, pass_at_k_records
from dsdr_eval.rundir.results import AVERAGE, RunResults, load_run

REPORT_JSON = "report.json"
README = "README.md"


def _check_out_dir(out: Path) -> list[str]:
    """Files of a previous report at `out` (to replace); refuse any other non-empty directory."""
    if out.exists() and not out.is_dir():
        raise DsdrError(f"--out {out}: exists and is not a directory")
    if not out.is_dir() or not any(out.iterdir()):
        return []
    previous = out / REPORT_JSON
    if not previous.exists():
        raise DsdrError(f"--out {out}: directory exists, is not empty and holds no {REPORT_JSON} "
                        "(not a previous report); choose another --out")
    try:
        old = read_json(previous).get("files", [])
    except (DsdrError, AttributeError):
        old = []
    return [str(f) for f in old if isinstance(f, str)]


def _publish(staging: Path, out: Path, old_files: list[str]) -> None:
    """Replace the previous report's files by the new ones (files we did not write are left alone)."""
    out.mkdir(parents=True, exist_ok=True)
    root = out.resolve()
    for rel in old_files:
        target = (out / rel).resolve()
        if target.is_file() and root in target.parents:
            target.unlink()
    for path in sorted(staging.rglob("*")):
        if path.is_file():
            target = out / path.relative_to(staging)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
    plots_dir = out / "plots"
    if plots_dir.is_dir() and not any(plots_dir.iterdir()):
        plots_dir.rmdir()


def _unique_labels(runs: list[RunResults]) -> list[RunResults]:
    seen: dict[str, int] = {}
    fixed = []
    for run in runs:
        label = run.label
        if label in seen:
            seen[label] += 1
            label = f"{label} #{seen[label]}"
        else:
            seen[label] = 1
        fixed.append(run.relabel(label))
    return fixed


def _select_baseline(runs: list[RunResults], baseline: str | None) -> RunResults:
    if baseline is None:
        return runs[0]
    for run in runs:
        if baseline in (run.label, str(run.path), run.path.name):
            return run
    raise DsdrError(f"--baseline {baseline!r}: no run has that label or directory "
                    f"(labels: {', '.join(r.label for r in runs)})")


def make_report(options: ReportOptions, command: Sequence[str] = ()) -> dict[str, Any]:
    """Write the report directory of ``options`` (``dsdr-eval report``'s options); return the report.json
    content. ``command``: the exact argv that made the report (README.md and report.json show it).
    Raises DsdrError on bad input."""
    if not options.runs and not options.train:
        raise DsdrError("report: give at least one evaluation RUN_DIR (or --train TRAIN_RUN)")
    if options.label and len(options.label) != len(options.runs):
        raise DsdrError(f"--label given {len(options.label)} times for {len(options.runs)} run(s); "
                        "give one --label per RUN_DIR, in the same order")
    runs = [load_run(path, options.label[i] if options.label else None) for i, path in enumerate(options.runs)]
    runs = _unique_labels(runs)
    train_runs = [load_train_run(path) for path in options.train]

    differences = protocol_differences(runs)
    if differences and not options.allow_mixed:
        raise DsdrError("report: the runs were evaluated with different protocols, so their numbers are not "
                        "comparable:\n  " + "\n  ".join(differences) +
                        "\nRe-run with the same protocol, or pass --allow-mixed to put them side by side anyway "
                        "(the report then says so).")
    notes = protocol_notes(runs)

    out = Path(options.out)
    old_files = _check_out_dir(out)
    # Everything is written to a staging directory first: a failure leaves no half-made report.
    staging = out.parent / f".{out.name}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        report = _write_report(options, command, runs, train_runs, differences, notes, staging)
        _publish(staging, out, old_files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return report


def recorded_cwd(out: Path) -> str:
    """The working directory as a report records it: relative to the root of the git repository the report
    is written into (``.`` at its root), so a report committed there carries no path of the machine that
    made it; the absolute path when the report is outside a repository or the directory outside that one."""
    cwd, target = Path.cwd().resolve(), out.resolve()
    for root in (target, *target.parents):
        if (root / ".git").exists():
            return cwd.relative_to(root).as_posix() if cwd.is_relative_to(root) else str(cwd)
    return str(cwd)


def _content(options: ReportOptions, command: Sequence[str], **parts: Any) -> ReportContent:
    return ReportContent(title=options.title or Path(options.out).name, command=tuple(command),
                         cwd=recorded_cwd(Path(options.out)), digits=options.digits, bootstrap=options.bootstrap, seed=options.seed,
                         **parts)


def _write_tables(options: ReportOptions, runs: list[RunResults], write: Callable[[str, str], None]) -> dict[str, Any]:
    """Table 1 (md / tex / csv), passk.csv, diversity.csv, judge.csv; returns their content."""
    avg_metric, avg_notes = tables.choose_avg_metric(runs, options.avg_metric)
    ref_rows = reference.select_reference(options.reference, model_hints=[r.model or "" for r in runs]
                                          + [str(r.path) for r in runs])
    table1 = tables.build_table1(runs, ref_rows, avg_metric=avg_metric)
    table_md = tables.to_markdown(table1, digits=options.digits, with_ci=options.ci)
    write("table1.md", table_md)
    write("table1.tex", tables.to_latex(table1, digits=options.digits, with_ci=options.ci))
    write("table1.csv", tables.to_csv(table1))
    records = {"passk": pass_at_k_records(runs), "diversity": diversity_records(runs), "judge": judge_records(runs),
               "judge_grading": judge_grading_records(runs), "budget_curve": budget_curve_records(runs)}
    for name, rows in records.items():
        if rows:
            write(f"{name}.csv", tables.records_to_csv(rows))
    return {"table1": table1, "table_md": table_md, "avg_notes": avg_notes, "ref_rows": ref_rows, **records}


def _compared_metrics(runs: list[RunResults], passk: list[dict[str, Any]], avg_metric: str) -> list[str]:
    ks = sorted({r["k"] for r in passk if r["benchmark"] != AVERAGE})
    more_than_16 = any((b.n_samples_per_problem or 0) > 16 for r in runs for b in r.benchmarks.values())
    metrics = ["pass1", avg_metric] + (["avg@n"] if avg_metric == "avg@16" and more_than_16 else []) + \
              [f"pass@{k}" for k in ks if k in (8, 32, 64, 128) or (k == max(ks) and k > 1)]
    return list(dict.fromkeys(metrics))


def _paired_comparisons(options: ReportOptions, runs: list[RunResults], metrics: list[str]) -> dict[str, Any]:
    """Every run against the baseline (paired bootstrap over problems), or why none was made."""
    if len(runs) < 2:
        return {"comparison_skipped": "one evaluation run: nothing to compare"}
    if options.no_compare:
        return {"comparison_skipped": "disabled (--no-compare)"}
    baseline = _select_baseline(runs, options.baseline)
    comparisons: list[compare.Comparison] = []
    comparison_warnings: list[str] = []
    for run in runs:
        if run is baseline:
            continue
        try:
            results, warnings = compare.compare_runs(baseline, run, metrics=metrics, bootstrap=options.bootstrap,
                                                     seed=options.seed, allow_mismatch=options.allow_mixed)
        except compare.MissingGrades as exc:
            results, warnings = [], [f"not compared: {exc}"]
        except DsdrError as exc:
            if not options.allow_mixed:
                raise
            results, warnings = [], [f"not compared: {exc}"]
        comparisons.extend(results)
        comparison_warnings.extend(f"{run.label} vs {baseline.label}: {w}" for w in warnings)
    return {"comparisons": comparisons, "comparison_warnings": comparison_warnings, "baseline": baseline}


def _report_json(content: ReportContent, files: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "title": content.title, "command": list(content.command), "cwd": content.cwd, "created": rundir.now_iso(),
        "dsdr_version": rundir.library_versions().get("dsdr"),
        "runs": [{"label": r.label, "path": str(r.path), "model": r.model, "protocol": r.protocol_record(),
                  "versions": r.settings.versions, "provenance": dict(r.provenance.record) or None}
                 for r in content.runs],
        "train_runs": [{"label": t.label, "path": str(t.path), "steps": len(t.rows)} for t in content.train_runs],
        # the samples that hit max tokens (finish_reason length) or whose reasoning never closed, per run
        "truncation": [{"run": r.label, "benchmark": name, "hit_max_tokens": b.truncated_fraction,
                        "unclosed_reasoning": b.unclosed_reasoning_fraction}
                       for r in content.runs for name, b in r.benchmarks.items()
                       if b.truncated_fraction or b.unclosed_reasoning_fraction],
        "mixed_protocols": content.differences, "protocol_notes": content.notes, **extra,
        "comparisons": [c.as_record() for c in content.comparisons],
        "comparison_warnings": content.comparison_warnings,
        "plots": [{"name": p.name, "files": p.files, "skipped": p.skipped, "notes": p.notes}
                  for p in content.plot_results],
        "files": sorted(set(files + [REPORT_JSON])),
    }


def _write_report(options: ReportOptions, command: Sequence[str], runs: list[RunResults], train_runs: list[TrainRun], differences: list[str],
                  notes: list[str], out: Path) -> dict[str, Any]:
    files: list[str] = []

    def write(name: str, text: str) -> None:
        (out / name).write_text(text, encoding="utf-8")
        files.append(name)

    plot_results: list[plots.PlotResult] = []
    parts: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if runs:  # a training-only report has no evaluation table or figures
        parts = _write_tables(options, runs, write)
        avg_metric = parts["table1"].metrics[1]
        parts.update(_paired_comparisons(options, runs, _compared_metrics(runs, parts["passk"], avg_metric)))
        if parts.get("comparisons"):
            write("comparison.csv", tables.records_to_csv([c.as_record() for c in parts["comparisons"]]))
        plot_results = [plots.plot_pass_at_k(parts["passk"], out), plots.plot_diversity(parts["diversity"], out),
                        plots.plot_judge_vs_pass(parts["judge"], parts["passk"], out),
                        plots.plot_budget_curves(parts["budget_curve"], out)]
        extra = {"avg_metric": avg_metric, "reference": options.reference,
                 "reference_rows": [r.label for r in parts["ref_rows"]], "table1_csv": "table1.csv"}
    if train_runs:
        plot_results.append(plots.plot_training([(t.label, t.rows) for t in train_runs], out,
                                                smoothing=options.smoothing))
    for result in plot_results:
        files.extend(result.files)
    content = _content(options, command, runs=runs, train_runs=train_runs, differences=differences, notes=notes,
                       plot_results=plot_results, **parts)
    write(README, render_readme(content))
    report = _report_json(content, files, **extra)
    write_json(out / REPORT_JSON, report)
    return report
