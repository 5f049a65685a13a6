"""``dsdr-eval diversity RUN_DIR``: compute every diversity metric of a scored run directory.

The work is ``dsdr_eval.api.analysis.run_diversity``; heavy libraries (torch, sentence-transformers,
transformers) are imported only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dsdr_eval.options import commands
from dsdr_eval.options.parser import add_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, commands.DIVERSITY)


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from dsdr_eval.api.analysis import run_diversity
    from dsdr_eval.cli.args import from_namespace
    from dsdr_eval.cli.tables import print_table
    from dsdr_eval.diversity_metrics.run import summary_rows

    console = Console(stderr=True)
    result = run_diversity(from_namespace(commands.DiversityOptions, args), log=lambda msg: console.print(f"[dim]{msg}[/dim]"))
    print_table(f"diversity of {args.run_dir} (mean over problems)",
                ("benchmark", "subset", "D_emb", "D_eq", "d", "#classes", "DARLING Div", "Vendi(q=1)", "self-BLEU",
                 "#answers"), summary_rows(result))
    partition = next(iter(result.values()))["settings"]["partition"]
    if "pair_decisions" in partition:
        _print_pair_decisions(console, partition["pair_decisions"])
    console.print("written: metrics.json (benchmarks.*.diversity), diversity_per_problem.jsonl, "
                  "diversity_per_sample.jsonl")
    return 0


def _print_pair_decisions(console: Any, counts: dict[str, Any]) -> None:
    """How many judge pair decisions failed (they were treated as "not merged")."""
    reasons = ", ".join(f"{k}={v}" for k, v in counts["undecided_by_reason"].items())
    console.print(f"judge pair decisions: {counts['asked']} asked, {counts['equivalent']} equivalent, "
                  f"{counts['not_equivalent']} not, {counts['undecided']} undecided (not merged)"
                  + (f": {reasons}" if reasons else ""), style="yellow" if counts["undecided"] else None,
                  markup=False)


def run_standalone(argv: list[str] | None = None) -> int:
    """``python -m dsdr_eval.cli.diversity RUN_DIR ...`` (same as ``dsdr-eval diversity``)."""
    from dsdr_eval.cli import main as dsdr_eval_main

    return dsdr_eval_main(["diversity", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(run_standalone())
