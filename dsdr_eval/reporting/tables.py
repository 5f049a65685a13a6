"""Table 1 of the DSDR paper (Pass@1 / Avg@16 per benchmark + Average), and the other report tables.

Values come from each run's ``dsdr_eval.rundir.results.RunResults`` (fractions; shown as percent); published rows
come from `reference.py` as printed. Layout: one row per run, one column per benchmark in the
paper's order, each cell ``Pass@1 / Avg@16``, then the unweighted Average column (§6).

Writers: Markdown (pipe table), LaTeX (booktabs), CSV (long format, one line per row x benchmark
x metric, with the 95% CI from metrics.json ``ci95``).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from typing import Any

from dsdr_eval.reporting.reference import ReferenceRow
from dsdr_eval.reporting.runs import benchmark_title, order_benchmarks
from dsdr_eval.rundir.results import AVERAGE, RunResults, Scores

PASS1 = "pass1"
MISSING = "–"

# Text from a run (labels, benchmark names, model names, paths) is data, not Markdown: these characters
# would start emphasis, links, images (a remote fetch when rendered), HTML, math or a table cell.
_MD_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", **{ch: "\\" + ch for ch in "\\`*_[]|#!~$"}}


def md_escape(text: Any) -> str:
    """``text`` shown literally in Markdown (also inside a table cell: one line, ``|`` escaped)."""
    return "".join(_MD_ESCAPES.get(ch, ch) for ch in " ".join(str(text).split()))


def md_prose(text: Any) -> str:
    """A message of ours that quotes commands in backticks (``run `dsdr-eval diversity RUN_DIR` first``):
    each backtick span shown as code (``md_code``), the rest escaped as data (``md_escape``)."""
    parts = re.split(r"`([^`]+)`", " ".join(str(text).split()))
    return "".join(md_code(part) if i % 2 else "".join(_MD_ESCAPES.get(ch, ch) for ch in part)
                   for i, part in enumerate(parts))


def md_code(text: Any) -> str:
    """``text`` as an inline code span (paths): fenced by more backticks than it contains, one line."""
    text = " ".join(str(text).split()).replace("|", "\\|")
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


@dataclass(frozen=True)
class Cell:
    """One metric of one row and benchmark, in percent."""

    value: float | None
    lo: float | None = None
    hi: float | None = None
    printed: str | None = None  # published rows: the string as printed
    flag: str | None = None  # published rows: why the printed cell is suspicious


@dataclass(frozen=True)
class Row:
    label: str
    source: str  # "run" or "published"
    cells: dict[tuple[str, str], Cell]  # (benchmark | "average", metric) -> Cell
    run_dir: str | None = None
    block: str | None = None
    counts: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # benchmark -> (n_problems, n_samples)


@dataclass(frozen=True)
class Table1:
    benchmarks: list[str]
    metrics: tuple[str, str]  # ("pass1", "avg@16") or ("pass1", "avg@n")
    rows: list[Row]
    notes: list[str]

    def header(self, metric: str) -> str:
        return metric_title(metric)


def metric_title(metric: str) -> str:
    if metric == PASS1:
        return "Pass@1"
    if metric.startswith("avg@"):
        return "Avg@" + metric[4:]
    if metric.startswith("pass@"):
        return "Pass@" + metric[5:]
    if metric.startswith("maj@"):
        return "Maj@" + metric[4:]
    return metric


def _cell(scores: Scores, metric: str) -> Cell:
    """``metric`` of a benchmark's (or the average's) scores as a percent cell with its CI."""
    value, interval = scores.value(metric), scores.interval(metric)
    lo, hi = interval if interval is not None else (None, None)
    return Cell(_pct(value), _pct(lo), _pct(hi))


def _pct(x: float | None) -> float | None:
    return None if x is None else 100.0 * x


def choose_avg_metric(runs: list[RunResults], requested: str) -> tuple[str, list[str]]:
    """Resolve ``--avg-metric auto``: Avg@16 (the paper's) when every run has it everywhere, else avg@n."""
    if requested != "auto":
        return requested, []
    has_16 = all(b.scores.value("avg@16") is not None for run in runs for b in run.benchmarks.values())
    if has_16 or not runs:
        return "avg@16", []
    ns = sorted({str(b.n_samples_per_problem) for run in runs for b in run.benchmarks.values()})
    return "avg@n", [f"Avg@16 needs at least 16 rollouts per problem and some run has fewer "
                     f"(n = {', '.join(ns)}): the table shows Avg@n, the mean over all n rollouts, instead. "
                     "It is not the paper's Avg@16."]


def _run_row(run: RunResults, benchmarks: list[str], metrics: tuple[str, str], notes: list[str]) -> Row:
    cells: dict[tuple[str, str], Cell] = {}
    counts = {}
    for bench in benchmarks:
        entry = run.benchmarks.get(bench)
        if entry is None:
            continue
        counts[bench] = (entry.n_problems, entry.n_samples_per_problem)
        for metric in metrics:
            cells[(bench, metric)] = _cell(entry.scores, metric)
    # The Average column is the unweighted mean over the table's benchmarks (§6). When the run
    # covers exactly those, it is metrics.json's own "average"; a run missing one gets none.
    covers_all = set(run.benchmarks) == set(benchmarks)
    for metric in metrics:
        if covers_all and run.average is not None and run.average.scores.value(metric) is not None:
            cells[(AVERAGE, metric)] = _cell(run.average.scores, metric)
        else:
            values = [cells.get((b, metric), Cell(None)).value for b in benchmarks]
            if values and all(v is not None for v in values):
                cells[(AVERAGE, metric)] = Cell(sum(values) / len(values))
    if not covers_all:
        notes.append(f"{run.label}: has no results for "
                     f"{', '.join(benchmark_title(b) for b in benchmarks if b not in run.benchmarks)}; "
                     "its Average is left empty.")
    return Row(run.label, "run", cells, run_dir=str(run.path), counts=counts)


def build_table1(runs: list[RunResults], reference: list[ReferenceRow], *, avg_metric: str = "avg@16") -> Table1:
    metrics = (PASS1, avg_metric)
    benchmarks = order_benchmarks({b for run in runs for b in run.benchmarks})
    if not runs and reference:
        benchmarks = order_benchmarks({b for row in reference for b in row.values if b != AVERAGE})
    notes: list[str] = []
    rows = [_run_row(run, benchmarks, metrics, notes) for run in runs]
    for ref in reference:
        cells = {}
        for bench in [*benchmarks, AVERAGE]:
            for metric in metrics:
                # the paper publishes Avg@16 only: with an avg@n table its Avg@16 fills that column (noted below)
                published = "avg@16" if metric == avg_metric else metric
                printed = ref.printed.get(bench, {}).get(published)
                if printed is None:
                    continue
                cells[(bench, metric)] = Cell(float(printed), printed=printed,
                                              flag=ref.flags.get(f"{bench}.{published}"))
        rows.append(Row(ref.label, "published", cells, block=ref.block_id))
    if reference:
        paper_benchmarks = [b for b in reference[0].values if b != AVERAGE]
        if set(benchmarks) != set(paper_benchmarks):
            notes.append("The published Average is over AIME24, AIME25, MATH500, Minerva and OlympiadBench; "
                         "the runs' Average is over the benchmarks of this table "
                         f"({', '.join(benchmark_title(b) for b in benchmarks)}), so the two are not comparable.")
        if avg_metric != "avg@16":
            notes.append(f"Published rows show the paper's Avg@16 in the {metric_title(avg_metric)} column.")
    return Table1(benchmarks, metrics, rows, notes)


# ----------------------------------------------------------------------------------------- format


def format_value(cell: Cell | None, *, digits: int, with_ci: bool, latex: bool = False) -> str:
    if cell is None or cell.value is None:
        return "--" if latex else MISSING
    text = cell.printed if cell.printed is not None else f"{cell.value:.{digits}f}"
    if with_ci and cell.lo is not None and cell.hi is not None:
        ci = f"[{cell.lo:.{digits}f}, {cell.hi:.{digits}f}]"
        text += (r" {\scriptsize " + ci + "}") if latex else f" {ci}"
    if cell.flag:
        text += r"$^\dagger$" if latex else "†"
    return text


def _columns(table: Table1) -> list[str]:
    return [*table.benchmarks, AVERAGE]


def _column_title(bench: str) -> str:
    return "Average" if bench == AVERAGE else benchmark_title(bench)


def _flag_lines(table: Table1) -> list[str]:
    lines = []
    for row in table.rows:
        for (bench, metric), cell in row.cells.items():
            if cell.flag:
                lines.append(f"{row.label}, {_column_title(bench)} {metric_title(metric)}: {cell.flag}")
    return lines


def to_markdown(table: Table1, *, digits: int = 1, with_ci: bool = False) -> str:
    m1, m2 = table.metrics
    cols = _columns(table)
    out = [f"| Run ({metric_title(m1)} / {metric_title(m2)}, %) | "
           + " | ".join(md_escape(_column_title(c)) for c in cols) + " |",
           "|---|" + "---:|" * len(cols)]
    for row in table.rows:
        cells = []
        for bench in cols:
            a = format_value(row.cells.get((bench, m1)), digits=digits, with_ci=with_ci)
            b = format_value(row.cells.get((bench, m2)), digits=digits, with_ci=with_ci)
            cells.append(f"{a} / {b}")
        out.append(f"| {md_escape(row.label)} | " + " | ".join(cells) + " |")
    flags = _flag_lines(table)
    if flags:
        out.append("")
        out.extend(f"† {md_escape(line)}" for line in flags)
    return "\n".join(out) + "\n"


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text)


def to_latex(table: Table1, *, digits: int = 1, with_ci: bool = False, caption: str | None = None) -> str:
    m1, m2 = table.metrics
    cols = _columns(table)
    lines = [r"% requires \usepackage{booktabs}", r"\begin{table}[t]", r"\centering", r"\small",
             r"\begin{tabular}{l" + "c" * len(cols) + "}", r"\toprule",
             "Method & " + " & ".join(latex_escape(_column_title(c)) for c in cols) + r" \\", r"\midrule"]
    previous_source = None
    for row in table.rows:
        if previous_source is not None and row.source != previous_source:
            lines.append(r"\midrule")
            lines.append(r"\multicolumn{" + str(len(cols) + 1) + r"}{l}{\emph{Published (DSDR paper, Table 1)}} \\")
        previous_source = row.source
        cells = [format_value(row.cells.get((c, m1)), digits=digits, with_ci=with_ci, latex=True) + " / "
                 + format_value(row.cells.get((c, m2)), digits=digits, with_ci=with_ci, latex=True) for c in cols]
        lines.append(latex_escape(row.label) + " & " + " & ".join(cells) + r" \\")
    lines.append(r"\bottomrule")
    lines.append(r"\end{tabular}")
    caption = caption or f"{metric_title(m1)} / {metric_title(m2)} (\\%)."
    flags = _flag_lines(table)
    if flags:
        caption += " $^\\dagger$ " + "; ".join(latex_escape(f) for f in flags) + "."
    lines.append(r"\caption{" + caption + "}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


CSV_FIELDS = ["label", "source", "block", "benchmark", "metric", "value_pct", "ci95_lo_pct", "ci95_hi_pct",
              "n_problems", "n_samples_per_problem", "printed", "flag", "run_dir"]


def _num(x: float | None) -> str:
    return "" if x is None else repr(round(x, 10))


def to_csv(table: Table1) -> str:
    """Long format, full precision (percent); the CI columns are the metrics.json ci95 bounds."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in table.rows:
        for bench in _columns(table):
            for metric in table.metrics:
                cell = row.cells.get((bench, metric))
                if cell is None:
                    continue
                n_problems, n_samples = row.counts.get(bench, (None, None))
                writer.writerow({
                    "label": row.label, "source": row.source, "block": row.block or "", "benchmark": bench,
                    "metric": metric, "value_pct": _num(cell.value), "ci95_lo_pct": _num(cell.lo),
                    "ci95_hi_pct": _num(cell.hi), "n_problems": "" if n_problems is None else n_problems,
                    "n_samples_per_problem": "" if n_samples is None else n_samples,
                    "printed": cell.printed or "", "flag": cell.flag or "", "run_dir": row.run_dir or "",
                })
    return buf.getvalue()


# ---------------------------------------------------------------------------- other report tables


def records_to_csv(records: list[dict[str, Any]]) -> str:
    if not records:
        return ""
    fields = list(records[0])
    for rec in records[1:]:
        fields.extend(k for k in rec if k not in fields)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for rec in records:
        writer.writerow({k: ("" if v is None else v) for k, v in rec.items()})
    return buf.getvalue()


def records_to_markdown(records: list[dict[str, Any]], columns: list[str], *, titles: dict[str, str] | None = None,
                        digits: int = 1, percent: set[str] | None = None) -> str:
    titles = titles or {}
    percent = percent or set()
    out = ["| " + " | ".join(md_escape(titles.get(c, c)) for c in columns) + " |", "|" + "---|" * len(columns)]
    for rec in records:
        cells = []
        for c in columns:
            v = rec.get(c)
            if v is None:
                cells.append(MISSING)
            elif isinstance(v, float):
                cells.append(f"{100 * v:.{digits}f}" if c in percent else f"{v:.3f}")
            else:
                cells.append(md_escape(v))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def pass_at_k_markdown(records: list[dict[str, Any]], *, digits: int = 1) -> str:
    """A wide table: one line per run x benchmark, one column per k (percent)."""
    ks = sorted({r["k"] for r in records})
    grouped: dict[tuple[str, str], dict[int, float]] = {}
    for r in records:
        grouped.setdefault((r["label"], r["benchmark"]), {})[r["k"]] = r["value"]
    out = ["| Run | Benchmark | " + " | ".join(f"Pass@{k}" for k in ks) + " |", "|---|---|" + "---:|" * len(ks)]
    for (label, bench), values in grouped.items():
        cells = [MISSING if k not in values else f"{100 * values[k]:.{digits}f}" for k in ks]
        out.append(f"| {md_escape(label)} | {md_escape(_column_title(bench))} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


# Where each diversity measure comes from (the report's and the dashboard's captions).
DIVERSITY_SOURCES = {"semantic": "D_emb (DSDR §3.1, all-MiniLM-L6-v2)", "formula": "D_eq (DSDR §3.1)",
                     "partition": "DARLING Div (partition classes, floor 0.1)",
                     "vendi": "Vendi score, order 1, embedding kernel"}