"""``dsdr-eval run``: generate, grade and score a model on math benchmarks (resumable).

Parses the options, calls the library (``dsdr_eval.run.evaluation.run_evaluation``, which
``dsdr_eval.evaluate`` calls too) and prints the summary.

    dsdr-eval run --model MODEL --benchmarks aime24,aime25,math500,minerva,olympiadbench \\
        --protocol dsdr-paper --out RUN_DIR [--backend auto|vllm|hf|openai] [overrides]

Heavy libraries (torch, transformers, vllm, openai) are imported inside functions only.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from dsdr_eval.options import commands
from dsdr_eval.options.parser import add_options

if TYPE_CHECKING:  # the library loads when the subcommand runs, not for --help
    from dsdr_eval.run.finish import RunOutcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, commands.RUN)


def _print_summary(metrics: dict[str, Any]) -> None:
    """Per benchmark Pass@1 (the pass1 phase), Avg@16, Avg@n, the largest Pass@k, truncated share, in %."""
    from dsdr_eval.cli.tables import numeric_columns, print_table

    def pct(value: Any) -> str:
        return "-" if not isinstance(value, (int, float)) else f"{100 * value:.1f}"

    entries = dict(metrics.get("benchmarks", {}))
    if "average" in metrics and len(entries) > 1:
        entries["average"] = metrics["average"]
    rows = []
    for name, m in entries.items():
        pass_at = m.get("pass@k") or {}
        largest = max(pass_at, key=lambda k: int(k)) if pass_at else None
        rows.append((name, str(m.get("n_problems", "")), str(m.get("n_samples_per_problem", "")),
                     pct(m.get("pass1")), pct(m.get("avg@16")), pct(m.get("avg@n")),
                     f"{pct(pass_at[largest])} @{largest}" if largest else "-", pct(m.get("truncated_fraction"))))  # finish_reason length
    print_table("dsdr-eval run, % (Pass@1 = the pass1 phase; Avg@n = pass@1 of the n samples; Pass@k at the largest k)",
                numeric_columns("benchmark", "problems", "n", "Pass@1", "Avg@16", "Avg@n", "Pass@k", "hit max tokens"), rows)


def main(args: argparse.Namespace) -> int:
    from dsdr_eval.run.evaluation import run_evaluation
    from dsdr_eval.cli.args import from_namespace

    result = run_evaluation(from_namespace(commands.RunOptions, args))
    print_outcome(result)
    return result.exit_code


def print_outcome(result: RunOutcome) -> None:
    """The summary table, the run line and, when samples are missing, what to do."""
    from rich.console import Console

    from dsdr_eval.rundir import directory as rundir

    _print_summary(result.metrics)
    from dsdr_eval.cli.score import print_budget_curves

    print_budget_curves(result.metrics)
    console = Console()
    out, protocol, timings = result.out, result.protocol, result.timings
    console.print(f"run dir: {out}  |  backend {result.backend.get('name')} {result.backend.get('version')}"
                  f"  |  protocol {protocol.name}, max_tokens {protocol.max_tokens}, seed {protocol.seed}"
                  f"  |  generation {timings['generate_s']:.1f}s of {timings['total_s']:.1f}s total")
    if result.n_missing > 0:
        console.print(f"[red]{result.n_failed} samples failed after every retry "
                      f"({result.n_missing} missing; see {out / rundir.FAILURES}). Metrics above cover the "
                      "samples present; rerun the same command to retry only the missing ones.[/red]")


if __name__ == "__main__":  # `python -m dsdr_eval.cli.run ...` = `dsdr-eval run ...`
    from dsdr_eval.cli import main as dsdr_eval_main

    sys.exit(dsdr_eval_main(["run", *sys.argv[1:]]))
