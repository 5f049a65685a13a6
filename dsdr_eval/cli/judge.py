"""`dsdr-eval judge RUN_DIR`: LLM-as-judge diversity of a run's rollouts (docs/ALGORITHMS.md §5)."""

from __future__ import annotations

import argparse
import logging

from dsdr_eval.cli.args import JUDGE_ENDPOINT, add_openai_arguments, endpoint_config, integer, number


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


def _comma_list(value: str | None) -> tuple[str, ...] | None:
    if not value:
        return None
    names = tuple(part.strip() for part in value.split(",") if part.strip())
    return names or None


def _response_format(args: argparse.Namespace) -> str:
    """--response-format (checked by JudgeSettings; imported here, not at --help) with --json-mode."""
    from dsdr_eval.errors import DsdrError
    from dsdr_eval.llm_judge.structured import AUTO, JSON_OBJECT

    if args.json_mode and args.response_format not in (None, JSON_OBJECT):
        raise DsdrError(f"judge: --json-mode contradicts --response-format {args.response_format}")
    return JSON_OBJECT if args.json_mode else (args.response_format or AUTO)


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from dsdr_eval.cli.tables import Column, print_table
    from dsdr_eval.llm_judge.prompt import PromptBudget
    from dsdr_eval.llm_judge.run import JudgeSettings, run_judge
    from dsdr_eval.openai_api.client import OpenAICompatClient

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    endpoint = endpoint_config(args, JUDGE_ENDPOINT, model=args.judge_model, prefix="judge-")
    try:
        budget = PromptBudget(max_rollout_chars=args.max_rollout_chars, max_prompt_chars=args.max_prompt_chars)
    except ValueError as exc:
        from dsdr_eval.errors import DsdrError

        raise DsdrError(f"judge: {exc}") from None
    settings = JudgeSettings(benchmarks=_comma_list(args.benchmarks), limit=args.limit,
                             max_rollouts=args.max_rollouts, correct_only=args.correct_only, phase=args.phase,
                             temperature=args.judge_temperature, max_tokens=args.judge_max_tokens,
                             response_format=_response_format(args), use_cache=not args.no_cache, budget=budget)
    from dsdr_eval.rundir.directory import require_run_dir, writer_lock

    require_run_dir(args.run_dir)  # a missing RUN_DIR is an error, not created by the lock
    with writer_lock(args.run_dir), OpenAICompatClient(endpoint) as client:  # one writer per run directory
        blocks = run_judge(args.run_dir, client, settings, cache_dir=args.cache_dir,
                           progress=False if args.no_progress else None, retry_failed=args.retry_failed)

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    rows = [(name, fmt(block["logic"]), fmt(block["formula"]), fmt(block["semantic"]), fmt(block["overall"]),
             str(block["n_ok"]), ", ".join(f"{k}={v}" for k, v in block["failed_by_reason"].items()) or "0",
             str(block["n_skipped"]), str(block["n_cache_hits"])) for name, block in blocks.items()]
    # stderr, and 200 columns in a log: every failure reason in full (they wrap instead of being cut)
    print_table(f"LLM-judge diversity (0-10), judge {endpoint.model}",
                [*("benchmark", "logic", "formula", "semantic", "overall", "ok"), Column("failed", fold=True),
                 "skipped", "cache hits"], rows, stderr=True, pipe_width=200)
    console = Console(stderr=True)
    if not console.is_terminal:
        console = Console(stderr=True, width=200)
    total_ok = sum(b["n_ok"] for b in blocks.values())
    total_failed = sum(b["n_failed"] for b in blocks.values())
    total = sum(b["n_problems"] for b in blocks.values())
    console.print(f"wrote {args.run_dir}/judge.jsonl and the 'judge' key of metrics.json")
    if total_failed == 0:
        return 0
    reasons: dict[str, int] = {}
    for block in blocks.values():
        for reason, count in block["failed_by_reason"].items():
            reasons[reason] = reasons.get(reason, 0) + count
    summary = ", ".join(f"{reason}={count}" for reason, count in sorted(reasons.items()))
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
