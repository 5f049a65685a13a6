"""Report figures (matplotlib, Agg backend: no display needed), each saved as PNG and SVG.

* ``passk``: Pass@k per benchmark, k on a log2 axis, one line per run, 95% CI band (docs/ALGORITHMS.md §5).
* ``diversity``: semantic / formula / partition / Vendi diversity per benchmark, all rollouts vs
  correct-only rollouts (solid vs hatched bars).
* ``judge_vs_pass32``: LLM-judge diversity beside Pass@32 per benchmark (the DSDR paper's Figure 5
  layout: two panels of grouped bars, one group per benchmark, one bar per method).
* ``budget_curve``: accuracy against token budget per benchmark (log2 budget axis), one line per run, with
  the share of rollouts not finished by each budget dashed (issue 45; dsdr_eval/scoring/budget_curve.py).
* ``training``: training dynamics of ``--train`` runs (reward, entropy, similarity, length, ...).

Every function returns a `PlotResult`: the files written, or why the plot was skipped (the report
says so instead of failing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsdr_eval.reporting.runs import benchmark_title

FORMATS = ("png", "svg")


@dataclass(frozen=True)
class PlotResult:
    name: str
    title: str
    files: list[str] = field(default_factory=list)  # relative to the report dir
    skipped: str | None = None  # the reason, when nothing was drawn
    notes: list[str] = field(default_factory=list)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)  # headless: never needs a display
    import matplotlib.pyplot as plt

    # Labels and benchmark names are data: a "$" in one is text, not mathtext (an unknown command
    # such as \href would raise in the middle of a report)
    plt.rcParams["text.parse_math"] = False
    return plt


def _save(fig, out_dir: Path, name: str, formats=FORMATS) -> list[str]:
    plot_dir = out_dir / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for fmt in formats:
        path = plot_dir / f"{name}.{fmt}"
        # metadata without dates: the SVG/PNG bytes depend only on the data (reproducible reports)
        metadata = {"Date": None} if fmt == "svg" else {}
        fig.savefig(path, dpi=150, bbox_inches="tight", metadata=metadata)
        files.append(str(path.relative_to(out_dir)))
    return files


def _grid(n: int) -> tuple[int, int]:
    cols = min(3, n)
    return math.ceil(n / cols), cols


def _colors(labels: list[str]) -> dict[str, Any]:
    plt = _pyplot()
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {label: cycle[i % len(cycle)] for i, label in enumerate(labels)}


def _finish_grid(fig: Any, axes: Any, n_panels: int, title: str, out_dir: Path, name: str) -> list[str]:
    """A grid of one panel per benchmark: spare panels hidden, one legend below, saved and closed."""
    import matplotlib.pyplot as plt

    for ax in list(axes.flat)[n_panels:]:
        ax.set_visible(False)
    legend: dict[str, Any] = {}  # every run of every panel, once (a run may miss a panel's benchmark)
    for ax in list(axes.flat)[:n_panels]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    handles, names = list(legend.values()), list(legend)
    fig.legend(handles, names, loc="lower center", ncol=min(4, len(names)), bbox_to_anchor=(0.5, -0.02 - 0.03 * (len(names) > 4)))
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    files = _save(fig, out_dir, name)
    plt.close(fig)
    return files


def plot_pass_at_k(records: list[dict[str, Any]], out_dir: Path) -> PlotResult:
    title = "Pass@k per benchmark"
    if not records:
        return PlotResult("passk", title, skipped="no run has Pass@k values (metrics.json pass@k is empty)")
    plt = _pyplot()
    benchmarks = list(dict.fromkeys(r["benchmark"] for r in records))
    labels = list(dict.fromkeys(r["label"] for r in records))
    colors = _colors(labels)
    rows, cols = _grid(len(benchmarks))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    single_k = []
    for ax, bench in zip(axes.flat, benchmarks):
        for label in labels:
            points = sorted((r["k"], r["value"], r["ci95_lo"], r["ci95_hi"]) for r in records
                            if r["benchmark"] == bench and r["label"] == label)
            if not points:
                continue
            ks = [p[0] for p in points]
            ys = [100 * p[1] for p in points]
            ax.plot(ks, ys, marker="o", ms=3, color=colors[label], label=label)
            if all(p[2] is not None and p[3] is not None for p in points):
                ax.fill_between(ks, [100 * p[2] for p in points], [100 * p[3] for p in points],
                                color=colors[label], alpha=0.15, linewidth=0)
            if len(ks) == 1:
                single_k.append(f"{label} / {bench}")
        all_k = sorted({r["k"] for r in records if r["benchmark"] == bench})
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_k)
        ax.set_xticklabels([str(k) for k in all_k])
        ax.set_title("Average" if bench == "average" else benchmark_title(bench))
        ax.set_xlabel("k")
        ax.set_ylabel("Pass@k (%)")
        ax.grid(alpha=0.3)
    files = _finish_grid(fig, axes, len(benchmarks), "Pass@k (unbiased estimator, shaded: 95% bootstrap CI)",
                         out_dir, "passk")
    notes = [f"only one k for {x}: a point, not a curve" for x in single_k]
    return PlotResult("passk", title, files, notes=notes)


def plot_diversity(records: list[dict[str, Any]], out_dir: Path) -> PlotResult:
    title = "Diversity: all rollouts vs correct-only"
    if not records:
        return PlotResult("diversity", title, skipped="no diversity in metrics.json "
                          "(run `dsdr-eval diversity RUN_DIR` first)")
    plt = _pyplot()
    measures = [m for m in ("semantic", "formula", "partition", "vendi") if any(r["measure"] == m for r in records)]
    labels = list(dict.fromkeys(r["label"] for r in records))
    benchmarks = list(dict.fromkeys(r["benchmark"] for r in records))
    colors = _colors(labels)
    fig, axes = plt.subplots(1, len(measures), figsize=(max(4.5, 1.2 * len(benchmarks) * len(labels)) * len(measures) / 1.5, 3.6),
                             squeeze=False)
    width = 0.8 / (2 * len(labels))
    for ax, measure in zip(axes.flat, measures):
        for i, label in enumerate(labels):
            for j, subset in enumerate(("all", "correct")):
                xs, ys = [], []
                for b_index, bench in enumerate(benchmarks):
                    value = next((r["value"] for r in records if r["label"] == label and r["benchmark"] == bench
                                  and r["measure"] == measure and r["subset"] == subset), None)
                    if value is not None:
                        xs.append(b_index - 0.4 + width * (2 * i + j + 0.5))
                        ys.append(value)
                ax.bar(xs, ys, width=width, color=colors[label], alpha=1.0 if subset == "all" else 0.5,
                       hatch=None if subset == "all" else "//", edgecolor="black", linewidth=0.3,
                       label=f"{label} ({'all' if subset == 'all' else 'correct only'})")
        ax.set_xticks(range(len(benchmarks)))
        ax.set_xticklabels([benchmark_title(b) for b in benchmarks], rotation=20)
        ax.set_title(measure.capitalize() + (" score" if measure == "vendi" else " diversity"))
        ax.grid(axis="y", alpha=0.3)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(4, len(names)), bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    files = _save(fig, out_dir, "diversity")
    plt.close(fig)
    missing = [m for m in ("semantic", "formula", "partition", "vendi") if m not in measures]
    notes = [f"no {', '.join(missing)} values in metrics.json"] if missing else []
    return PlotResult("diversity", title, files, notes=notes)


def plot_judge_vs_pass(judge: list[dict[str, Any]], passk: list[dict[str, Any]], out_dir: Path,
                       k: int = 32) -> PlotResult:
    title = f"LLM-judge diversity beside Pass@{k} (paper Figure 5 layout)"
    if not judge:
        return PlotResult("judge_vs_pass32", title, skipped="no judge scores in metrics.json "
                          "(run `dsdr-eval judge RUN_DIR` first)")
    plt = _pyplot()
    notes = []
    available_k = sorted({r["k"] for r in passk})
    use_k = k if k in available_k else max([x for x in available_k if x <= k], default=None)
    if use_k != k:
        notes.append(f"Pass@{k} not available (too few rollouts per problem); "
                     + (f"the right panel shows Pass@{use_k}" if use_k else "the right panel is empty"))
    labels = list(dict.fromkeys(r["label"] for r in judge))
    benchmarks = list(dict.fromkeys(r["benchmark"] for r in judge))
    colors = _colors(labels)
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(9, 2.4 * len(benchmarks) * 2), 3.8))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        xs = [b - 0.4 + width * (i + 0.5) for b in range(len(benchmarks))]
        scores = [next((r["overall"] for r in judge if r["label"] == label and r["benchmark"] == bench), None)
                  for bench in benchmarks]
        left.bar([x for x, s in zip(xs, scores) if s is not None], [s for s in scores if s is not None],
                 width=width, color=colors[label], label=label)
        if use_k is not None:
            values = [next((100 * r["value"] for r in passk if r["label"] == label and r["benchmark"] == bench
                            and r["k"] == use_k), None) for bench in benchmarks]
            right.bar([x for x, v in zip(xs, values) if v is not None], [v for v in values if v is not None],
                      width=width, color=colors[label], label=label)
    for ax, ylabel, name in ((left, "judge diversity (overall, 0-10)", "LLM-judge diversity"),
                             (right, f"Pass@{use_k} (%)", f"Pass@{use_k}")):
        ax.set_xticks(range(len(benchmarks)))
        ax.set_xticklabels([benchmark_title(b) for b in benchmarks])
        ax.set_ylabel(ylabel)
        ax.set_title(name)
        ax.grid(axis="y", alpha=0.3)
    left.set_ylim(0, 10)
    left.legend(fontsize="small")
    fig.tight_layout()
    files = _save(fig, out_dir, "judge_vs_pass32")
    plt.close(fig)
    return PlotResult("judge_vs_pass32", title, files, notes=notes)


# Panels of the training-dynamics figure: (title, [metric keys], y label). Similarity is plotted
# as 1 - diversity, as the paper plots it.
TRAINING_PANELS = (
    ("Reward", ["reward/mean"], "mean verifier reward"),
    ("Accuracy", ["acc/mean", "val/acc"], "accuracy"),
    ("Policy entropy", ["entropy/mean"], "nats / token"),
    ("Semantic similarity", ["similarity/semantic"], "1 - semantic diversity"),
    ("Formula similarity", ["similarity/formula"], "1 - formula diversity"),
    ("Response length", ["response_length/mean"], "tokens"),
    ("Clip ratio (length)", ["response_length/clip_ratio"], "fraction truncated"),
    ("Policy-gradient loss", ["loss/pg"], "loss"),
    ("All-correct / all-wrong groups", ["groups/all_correct_frac", "groups/all_wrong_frac"], "fraction"),
)


def plot_budget_curves(records: list[dict[str, Any]], out_dir: Path) -> PlotResult:
    """Accuracy (avg@n of rollouts correct and finished within b) against the token budget b, per benchmark,
    one colour per run; dashed, same colour: the share not finished by b (truncated at that budget)."""
    title = "Accuracy at token budget per benchmark"
    if not records:
        return PlotResult("budget_curve", title, skipped="no run has a budget curve (metrics.json budget_curve: "
                                                         "score the run again; imported runs need token counts)")
    plt = _pyplot()
    benchmarks = list(dict.fromkeys(r["benchmark"] for r in records))
    labels = list(dict.fromkeys(r["label"] for r in records))
    colors = _colors(labels)
    rows, cols = _grid(len(benchmarks))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, bench in zip(axes.flat, benchmarks):
        for label in labels:
            points = sorted((r["budget"], r["accuracy"], r["not_finished"]) for r in records
                            if r["benchmark"] == bench and r["label"] == label)
            if not points:
                continue
            budgets = [p[0] for p in points]
            ax.plot(budgets, [100 * p[1] for p in points], marker="o", ms=3, color=colors[label], label=label)
            ax.plot(budgets, [100 * p[2] for p in points], ls="--", lw=1, color=colors[label], alpha=0.7)
        ax.set_xscale("log", base=2)
        ticks = sorted({r["budget"] for r in records if r["benchmark"] == bench})
        ax.set_xticks(ticks)  # the budgets themselves, as plain numbers (the log formatter's are mathtext)
        ax.set_xticklabels([str(t) for t in ticks], rotation=45 if len(ticks) > 6 else 0, fontsize=8)
        ax.minorticks_off()
        ax.set_title(benchmark_title(bench))
        ax.set_xlabel("token budget b (log2 scale)")
        ax.set_ylabel("% of rollouts")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    files = _finish_grid(fig, axes, len(benchmarks), "Accuracy at token budget b (solid: correct and finished within b; "
                         "dashed: not finished by b), from each run's own samples", out_dir, "budget_curve")
    return PlotResult("budget_curve", title, files)


def ema(values: list[float | None], alpha: float) -> list[float | None]:
    """Exponential moving average (alpha = weight of the past; 0 = no smoothing); gaps stay gaps."""
    out: list[float | None] = []
    state = None
    for v in values:
        if v is None:
            out.append(None)
            continue
        state = v if state is None else alpha * state + (1 - alpha) * v
        out.append(state)
    return out


def plot_training(train_runs: list[tuple[str, list[dict[str, Any]]]], out_dir: Path, *,
                  smoothing: float = 0.0) -> PlotResult:
    title = "Training dynamics"
    train_runs = [(label, rows) for label, rows in train_runs if rows]
    if not train_runs:
        return PlotResult("training", title, skipped="no training run with metrics.jsonl lines was given (--train)")
    plt = _pyplot()
    panels = [p for p in TRAINING_PANELS if any(k in row for _, rows in train_runs for row in rows for k in p[1])]
    if not panels:
        return PlotResult("training", title, skipped="the training metrics.jsonl has none of the plotted keys")
    colors = _colors([label for label, _ in train_runs])
    rows_n, cols = _grid(len(panels))
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.0 * rows_n), squeeze=False)
    for ax, (name, keys, ylabel) in zip(axes.flat, panels):
        for label, rows in train_runs:
            for key_index, key in enumerate(keys):
                points = [(row.get("step"), row.get(key)) for row in rows
                          if isinstance(row.get(key), (int, float)) and isinstance(row.get("step"), (int, float))]
                if not points:
                    continue
                steps = [p[0] for p in points]
                ys = ema([float(p[1]) for p in points], smoothing)
                style = "-" if key_index == 0 else "--"
                ax.plot(steps, ys, style, color=colors[label], marker="." if len(steps) < 30 else None,
                        label=label if len(keys) == 1 else f"{label}: {key}")
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize="x-small")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(4, len(names)), bbox_to_anchor=(0.5, -0.03))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    files = _save(fig, out_dir, "training")
    plt.close(fig)
    notes = [f"EMA smoothing alpha={smoothing}"] if smoothing else []
    return PlotResult("training", title, files, notes=notes)
