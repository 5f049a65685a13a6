"""`dsdr-eval score`: grade a samples file or a run directory (``dsdr_eval.api.analysis.run_score``) and print a
summary table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.options import commands
from dsdr_eval.options.parser import add_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, commands.SCORE)


def main(args: argparse.Namespace) -> int:
    from dsdr_eval.api.analysis import run_score
    from dsdr_eval.cli.args import from_namespace
    from dsdr_eval.scoring.judge_grading import unavailable_message

    out, metrics = run_score(from_namespace(commands.ScoreOptions, args))
    print_summary(metrics)
    print_agreement(metrics["provenance"].get("source_agreement"), out)
    print(f"wrote {out / rundir.GRADED} and {out / rundir.METRICS}")
    failed = unavailable_message(metrics)
    if failed:
        print(f"error: {failed}", file=sys.stderr)
    return 1 if failed else 0


def print_agreement(agreement: dict[str, Any] | None, out: Path | None = None) -> None:
    """Our grader against the source tool's verdicts (an imported run): one clipped line per shown
    disagreement (an extracted answer may be a whole 4 kB response); the full list is in a file."""
    from dsdr_eval.scoring.checks import clip

    if not agreement:
        return
    print(f"agreement with the source's grader: {agreement['n_agree']}/{agreement['n_compared']} "
          f"({100 * agreement['fraction']:.1f}%), {agreement['n_disagree']} disagree")
    for item in agreement["disagreements"]:
        print(f"  {tuple(item['key'])}: ours {'correct' if item['ours'] else 'incorrect'} "
              f"({clip(item['extracted'], _SHOWN_CHARS)}), source {'correct' if item['source'] else 'incorrect'} "
              f"({clip(item['source_extracted'], _SHOWN_CHARS)})")
    listed = agreement.get("disagreements_file")
    where = f"{out / listed if out is not None else listed}" if listed else "graded.jsonl"
    more = agreement["n_disagree"] - len(agreement["disagreements"])
    if agreement["n_disagree"]:
        print(f"  {f'... {more} more; ' if more > 0 else ''}all {agreement['n_disagree']} in full: {where}")


_SHOWN_CHARS = 40  # per answer in a disagreement line


def _fmt(value: Any, ci: Any = None) -> str:
    if value is None:
        return "-"
    text = f"{100 * value:.1f}"
    if isinstance(ci, list) and len(ci) == 2:
        text += f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
    return text


def _largest_k(entry: dict, family: str) -> tuple[str | None, float | None, Any]:
    ks = entry.get(family) or {}
    if not ks:
        return None, None, None
    k = max(ks, key=int)
    return k, ks[k], (entry.get("ci95", {}).get(family) or {}).get(k)


def print_summary(metrics: dict[str, Any]) -> None:
    """A table: one row per benchmark plus the macro averages; values in % with 95 % CI."""
    from dsdr_eval.cli.tables import Row, numeric_columns, print_table

    rows: list[Row] = []
    for name, entry in metrics["benchmarks"].items():
        counts = entry.get("status_counts", {})
        rows.append(Row([name, str(entry.get("n_problems", "-")), str(entry.get("n_samples_per_problem", "-")),
                         *_score_cells(entry),
                         "/".join(str(counts.get(s, 0)) for s in STATUS_COLUMNS)]))
    for key, label in (("average", "average (macro)"), ("average_table1", "average (Table 1's five)")):
        average = metrics.get(key) or {}
        if len(metrics["benchmarks"]) > 1 and average:
            rows.append(Row([label, "", "", *_score_cells(average), ""], style="bold"))
    print_table("dsdr-eval score (%, 95% bootstrap CI over problems)",
                numeric_columns("benchmark", "problems", "n", "Pass@1 (T-low)", "Avg@16", "Avg@n", "pass@k", "maj@k",
                                STATUS_HEADER), rows)
    print(f"  statuses: {'/'.join(STATUS_COLUMNS)} samples (truncated: cut off at the token limit or with "
          "its reasoning unclosed, without a final answer; never graded)")
    print_reasoning_summary(metrics)
    print_budget_curves(metrics)
    print_judge_grading(metrics)
    print_audit(metrics)


def print_audit(metrics: dict[str, Any], title_hint: bool = True) -> None:
    """The samples raising each audit flag (issue 43), per benchmark: a column per flag that any
    benchmark raises; nothing when no sample is flagged."""
    from dsdr_eval.scoring.audit_listing import audit_counts
    from dsdr_eval.cli.tables import Row, numeric_columns, print_table

    counts = audit_counts(metrics)
    raised = [flag for flag in next(iter(counts.values()), {}) if any(c.get(flag) for c in counts.values())]
    if not raised:
        if counts:
            print("audit: no sample flagged")
        return
    rows = [Row([name, str(metrics["benchmarks"][name].get("audit_flagged", "-")), *(str(c.get(f, 0)) for f in raised)])
            for name, c in counts.items()]
    hint = "; `dsdr-eval audit RUN_DIR` lists them" if title_hint else ""
    print_table(f"audit: samples a person should look at (docs/evaluate.md, Audit flags{hint})",
                numeric_columns("benchmark", "flagged", *raised), rows)


def print_budget_curves(metrics: dict[str, Any]) -> None:
    """Each benchmark's accuracy against token budget in short (issue 45; dsdr_eval.scoring.budget_curve), when some
    rollout was cut by its budget or finished late enough for the curve to say something; a benchmark
    without one says why."""
    from dsdr_eval.scoring.budget_curve import short_form

    lines = []
    for name, entry in metrics["benchmarks"].items():
        curve = entry.get("budget_curve")
        if curve:
            lines.append(f"  {name}: {short_form(curve)}")
        elif entry.get("budget_curve_unavailable"):
            lines.append(f"  {name}: no curve: {entry['budget_curve_unavailable']}")
    if lines:
        print("accuracy at token budget b (avg@n of rollouts correct and finished within b; finished share), "
              "from this run's samples (metrics.json budget_curve):")
        print("\n".join(lines))


def print_judge_grading(metrics: dict[str, Any]) -> None:
    """The symbolic and judge verdicts side by side (% of samples), when `--judge-grading` ran."""
    from dsdr_eval.cli.tables import Row, numeric_columns, print_table

    rows = []
    for name, entry in metrics["benchmarks"].items():
        block = entry.get("judge_grading")
        if block:
            accuracy = block["accuracy"]
            rows.append(Row([name, block["mode"], *(_fmt(accuracy[k]) for k in ("symbolic", "judge", "both", "any")),
                             *(str(block[k]) for k in ("n_disagree", "n_asked", "n_unsure", "n_unavailable"))]))
    if rows:
        print_table("judge grading (% of samples; 'correct' stays the symbolic verdict)",
                    numeric_columns("benchmark", "mode", "symbolic", "judge", "both", "any", "disagree", "asked",
                                    "unsure", "unavailable"), rows)


STATUS_COLUMNS = ("correct", "incorrect", "no_answer", "truncated", "timeout", "error")
STATUS_HEADER = "statuses\n(c/i/na/tr/to/e)"  # spelled out under the table: the full names would be cut


def print_reasoning_summary(metrics: dict[str, Any]) -> None:
    """Thinking-model figures per benchmark (issue 33), printed when any sample reasoned, hit its token
    limit or had its answer changed by a reasoning rule: the shares of truncated (finish_reason
    length) and unclosed-reasoning samples, mean reasoning and answer tokens, answers each rule changed."""
    from dsdr_eval.cli.tables import Row, numeric_columns, print_table

    rows = []
    for name, entry in metrics["benchmarks"].items():
        changed = entry.get("answers_changed_by_rule") or {}
        if not (entry.get("truncated_fraction") or entry.get("unclosed_reasoning_fraction")
                or entry.get("mean_reasoning_tokens") or any(changed.values()) or entry.get("reasoning_tokens_unknown")):
            continue
        tokens = [entry.get("mean_reasoning_tokens"), entry.get("mean_answer_tokens")]
        rows.append(Row([name, _fmt(entry.get("truncated_fraction")), _fmt(entry.get("unclosed_reasoning_fraction")),
                         *("-" if t is None else f"{t:.0f}" for t in tokens),
                         ", ".join(f"{rule} {n}" for rule, n in changed.items() if n) or "-"]))
    if rows:
        print_table("reasoning and truncation (%, mean tokens; answers each rule changed)",
                    numeric_columns("benchmark", "hit max tokens", "unclosed reasoning", "reasoning tokens",
                                    "answer tokens", "answers changed"), rows)
    for name, entry in metrics["benchmarks"].items():  # a "-" says why
        if entry.get("reasoning_tokens_unknown"):
            print(f"  {name}: tokens '-': {entry['reasoning_tokens_unknown']}")


def _score_cells(entry: dict[str, Any]) -> list[str]:
    """Pass@1, Avg@16, Avg@n, pass@k and maj@k (largest k) of one benchmark or average, with CIs."""
    ci = entry.get("ci95", {})
    k, pass_k, pass_ci = _largest_k(entry, "pass@k")
    mk, maj_k, maj_ci = _largest_k(entry, "maj@k")
    return [_fmt(entry.get("pass1"), ci.get("pass1")), _fmt(entry.get("avg@16"), ci.get("avg@16")),
            _fmt(entry.get("avg@n"), ci.get("avg@n")), f"@{k}: {_fmt(pass_k, pass_ci)}" if k else "-",
            f"@{mk}: {_fmt(maj_k, maj_ci)}" if mk else "-"]
