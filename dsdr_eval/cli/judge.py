"""`dsdr-eval judge RUN_DIR`: LLM-as-judge diversity of a run's rollouts (docs/ALGORITHMS.md §5).

The work is ``dsdr_eval.api.analysis.run_judging``; this module parses, calls it and prints the table.
"""

from __future__ import annotations

import argparse
import logging

from dsdr_eval.cli.args import JUDGE_ENDPOINT, add_openai_arguments, integer, number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Score the diversity of each problem's rollouts with an LLM judge (logic, formula, "
                          "semantic, overall; 0-10). Writes RUN_DIR/judge.jsonl and a 'judge' key per benchmark "
                          "in metrics.json.")
    parser.add_argument("run_dir", help="run directory with graded.jsonl (or samples.jsonl)")
    parser.add_argument("--judge-model", required=True, metavar="MODEL", help="model name served by the judge endpoint")
    add_openai_arguments(parser, JUDGE_ENDPOINT, prefix="judge-", title="judge endpoint (any OpenAI-compatible server)")
    sel = parser.add_argument_group("which rollouts")
    sel.add_argument("--benchmarks", default=None,
                     help="comma list of benchmarks to judge (default: all in the run; the paper judged "
                          "aime24,aime25,minerva,olympiadbench)")
    sel.add_argument("--limit", type=integer(1), default=None, help="judge only the first N problems of each benchmark")
    sel.add_argument("--max-rollouts", type=integer(1), default=32,
                     help="rollouts per judge call: the first N by sample_idx (default 32, as in the paper)")
    sel.add_argument("--correct-only", action="store_true", help="judge only correct rollouts (needs graded.jsonl)")
    sel.add_argument("--phase", default="sampling", help="sample phase to judge (default 'sampling')")
    gen = parser.add_argument_group("judge call")
    gen.add_argument("--judge-temperature", type=number(0), default=0.0, help="default 0.0")
    gen.add_argument("--judge-max-tokens", type=integer(1), default=512, help="max reply tokens (default 512)")
    gen.add_argument("--response-format", default=None, metavar="auto|json_schema|json_object|text",
                     help="response_format of each judge call: auto (default: the verdict's JSON schema, falling "
                          "back to json_object, then plain text, where the server refuses it; detected once and "
                          "recorded) or one mode alone")
    gen.add_argument("--json-mode", action="store_true", help="same as --response-format json_object")
    gen.add_argument("--max-rollout-chars", type=integer(1), default=6000,
                     help="character budget per rollout; longer ones keep head+tail (default 6000)")
    gen.add_argument("--max-prompt-chars", type=integer(1), default=100_000,
                     help="character budget of the whole prompt, shared by the rollouts (default 100000)")
    cache = parser.add_argument_group("cache")
    cache.add_argument("--cache-dir", default=None, help="where judge_cache.jsonl lives (default RUN_DIR)")
    cache.add_argument("--no-cache", action="store_true", help="neither read nor write the response cache")
    cache.add_argument("--retry-failed", action="store_true",
                       help="ask again for problems whose cached reply could not be parsed (the new reply "
                            "replaces the cached one); other cached replies are still used")
    parser.add_argument("--allow-failures", action="store_true",
                        help="exit 0 when some (not all) problems failed; by default any failed problem exits 1 "
                             "(the means cover the successful problems only)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from dsdr_eval.api.analysis import JudgeOptions, run_judging
    from dsdr_eval.api.options import from_namespace
    from dsdr_eval.cli.tables import Column, print_table

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    outcome = run_judging(from_namespace(JudgeOptions, args))
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
