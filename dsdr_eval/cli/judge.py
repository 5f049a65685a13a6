"""`dsdr-eval judge RUN_DIR`: LLM-as-judge diversity of a run's rollouts (docs/ALGORITHMS.md §5).

The work is ``dsdr_eval.api.analysis.run_judging``; this module parses, calls it and prints the table.
"""

from __future__ import annotations

import argparse
import logging

from dsdr_eval.options import commands
from dsdr_eval.options.parser import add_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = commands.JUDGE_DESCRIPTION
    add_options(parser, commands.JUDGE)


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from dsdr_eval.api.analysis import run_judging
    from dsdr_eval.cli.args import from_namespace
    from dsdr_eval.cli.tables import Column, print_table

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    outcome = run_judging(from_namespace(commands.JudgeOptions, args))
    blocks = outcome.blocks

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    rows = [(name, fmt(block["logic"]), fmt(block["formula"]), fmt(block["semantic"]), fmt(block["overall"]),
             str(block["n_ok"]), ", ".join(f"{k}={v}" for k, v in block["failed_by_reason"].items()) or "0",
             str(block["n_skipped"]), str(block["n_cache_hits"])) for name, block in blocks.items()]
    # stderr, and 200 columns in a log: every failure reason in full (they wrap instead of being cut)
    print_table(f"LLM-judge diversity (0-10), judge {outcome.model}",
                [*("benchmark", "logic", "formula", "semantic", "overall", "ok"), Column("failed", fold=True),
                 "skipped", "cache hits"], rows, stderr=True, pipe_width=200)
    console = Console(stderr=True)
    if not console.is_terminal:
        console = Console(stderr=True, width=200)
    total_ok, total_failed, total = outcome.n_ok, outcome.n_failed, outcome.n_problems
    console.print(f"wrote {args.run_dir}/judge.jsonl and the 'judge' key of metrics.json")
    if total_failed == 0:
        return 0
    summary = outcome.failure_summary()
    what = "every judge call failed" if total_ok == 0 else f"{total_failed} of {total} problems failed"
    hint = ("rerun to retry HTTP failures (they are not cached); add --retry-failed to ask again for "
            "unparseable cached replies")
    if args.allow_failures and total_ok > 0:  # nothing judged at all is never a success
        console.print(f"warning: {what} ({summary}); --allow-failures: exit 0; {hint}", markup=False,
                      style="yellow")
        return 0
    console.print(f"error: {what} ({summary}); the means above cover the successful problems only; {hint}; "
                  "--allow-failures exits 0 anyway", markup=False, style="red")
    return 1
