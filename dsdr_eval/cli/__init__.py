"""`dsdr-eval`: one entry point, subcommands dispatched to their modules.

Each subcommand module defines ``add_arguments(parser)`` and ``main(args) -> int`` and is imported
only when that subcommand runs, so ``dsdr-eval --help`` is fast and lists every subcommand even if
one of their modules (or its heavy dependencies) is missing.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

from dsdr_eval import __version__
from dsdr_eval.options.parser import OneLineParser
from dsdr_eval.errors import DsdrError, os_error_line

# name -> (module, one-line help). Static on purpose: --help must not import anything heavy.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("dsdr_eval.cli.run", "generate samples for benchmarks with a model (vllm / hf / openai backend)"),
    "score": ("dsdr_eval.cli.score", "grade samples with math-verify and compute Pass@k / Avg@k / maj@k with CIs"),
    "diversity": ("dsdr_eval.cli.diversity", "compute DSDR, DARLING partition, Vendi, lexical and answer diversity metrics for a run"),
    "judge": ("dsdr_eval.cli.judge", "LLM-as-judge diversity scores through an OpenAI-compatible endpoint"),
    "import": ("dsdr_eval.cli.importing", "import another tool's results (lm-eval, lighteval, Qwen2.5-Math, verl, OpenAI batch, JSONL) as a run directory"),
    "merge": ("dsdr_eval.cli.merge", "join the shards of one run (run --shard I/N) into one run directory"),
    "sweep": ("dsdr_eval.cli.sweep", "evaluate every (K-th) checkpoint of a training run, one run directory each (resumable)"),
    "report": ("dsdr_eval.cli.report", "tables and plots comparing runs against the paper's numbers"),
    "audit": ("dsdr_eval.cli.audit", "list the graded samples a person should look at (audit flags of a scored run)"),
}


def _load(name: str) -> ModuleType:
    module_name = SUBCOMMANDS[name][0]
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise DsdrError(f"subcommand '{name}' is not available: importing {module_name} failed "
                        f"({type(exc).__name__}: {exc})") from None


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only ``selected``'s module is imported to add its arguments."""
    parser = OneLineParser(
        prog="dsdr-eval", description="Evaluation suite for reasoning LLMs: accuracy, Pass@k, diversity.")
    parser.add_argument("--version", action="version", version=f"dsdr-eval {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            _load(name).add_arguments(sub)
            # argparse reports a subcommand's unknown options from this parser: point to the subcommand's help
            parser.help_prog, parser.known = f"dsdr-eval {name}", list(sub._option_string_actions)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Top-level options take no value, so the first bare word is the subcommand.
    selected = next((arg for arg in argv if not arg.startswith("-")), None)
    try:
        parser = build_parser(selected if selected in SUBCOMMANDS else None)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            if exc.code in (0, None):  # --help, --version
                raise
            return exc.code if isinstance(exc.code, int) else 2  # a bad argument, reported in one line
        if args.command is None:
            print(f"dsdr-eval: error: a COMMAND is required: {', '.join(SUBCOMMANDS)} (see dsdr-eval --help)",
                  file=sys.stderr)
            return 2
        return int(_load(args.command).main(args) or 0)
    except DsdrError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, a read-only output, an unreadable input: one line, not a traceback
        print(f"error: {os_error_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
