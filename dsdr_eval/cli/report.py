"""``dsdr-eval report RUN_DIR [RUN_DIR ...] --out reports/NAME``: tables, plots and paired comparisons.

The work is ``dsdr_eval.api.analysis.run_report`` (matplotlib and numpy are imported when it runs, so
``dsdr-eval --help`` stays fast); this module parses, calls it and prints what it wrote.
"""

from __future__ import annotations

import argparse
import re
import sys

from dsdr_eval.cli.args import integer, number, output_dir


def _avg_metric(text: str) -> str:
    if not re.fullmatch(r"auto|avg@n|avg@[1-9][0-9]*", text):
        raise argparse.ArgumentTypeError(f"expected auto, avg@16, avg@n or avg@K, got {text!r}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Make a report directory from evaluation runs: the paper's Table 1 "
                          "(Markdown, LaTeX, CSV), Pass@k / diversity / judge figures (PNG + SVG), paired "
                          "bootstrap comparisons, and the protocol every number was computed with.")
    parser.add_argument("runs", nargs="*", metavar="RUN_DIR",
                        help="evaluation run directories (each with metrics.json from `dsdr-eval score`)")
    parser.add_argument("--out", required=True, metavar="DIR", type=output_dir,
                        help="report directory, e.g. reports/NAME (regenerated if it holds a previous report)")
    parser.add_argument("--label", action="append", default=[], metavar="TEXT",
                        help="row label of each RUN_DIR, in order (default: config.json label, else the directory name)")
    parser.add_argument("--reference", metavar="SPEC", default=None,
                        help="put published numbers beside the runs: 'paper' (the DSDR Table 1 block of the runs' "
                             "backbone, else all), 'paper:all', or 'paper:qwen2.5-math-1.5b|qwen3-1.7b|qwen3-4b'")
    parser.add_argument("--allow-mixed", action="store_true",
                        help="put runs with different protocols (n, temperature, top-p, max tokens, template, "
                             "backend, problem sets) side by side; the report says so")
    parser.add_argument("--ci", action="store_true", help="show 95%% CIs in the Markdown/LaTeX tables (always in the CSV)")
    parser.add_argument("--avg-metric", default="auto", metavar="METRIC", type=_avg_metric,
                        help="second number of each Table 1 cell: avg@16 (the paper's), avg@n, avg@64; 'auto' = avg@16 "
                             "when every run has >= 16 rollouts, else avg@n (default: auto)")
    parser.add_argument("--digits", type=integer(0, 6), default=1, help="decimals in the tables (default 1)")
    parser.add_argument("--baseline", metavar="LABEL", default=None,
                        help="run the others are compared against (label or directory; default: the first RUN_DIR)")
    parser.add_argument("--bootstrap", type=integer(0), default=2000, help="paired-bootstrap resamples (default 2000)")
    parser.add_argument("--seed", type=integer(0), default=0, help="seed of the paired bootstrap (default 0)")
    parser.add_argument("--no-compare", action="store_true", help="skip the paired comparisons")
    parser.add_argument("--train", action="append", default=[], metavar="TRAIN_RUN",
                        help="also plot the training dynamics of this training run (metrics.jsonl); repeatable")
    parser.add_argument("--smoothing", type=number(0, 1, max_open=True), default=0.0,
                        help="EMA weight of the past for the training curves, 0 (none) to <1 (default 0)")
    parser.add_argument("--title", default=None, help="report title (default: the --out directory name)")


def _command_line(args: argparse.Namespace) -> list[str]:
    """The exact command: the process argv when this is `dsdr-eval report ...`, else a faithful rebuild."""
    argv = sys.argv[1:]
    if argv[:1] == ["report"]:
        return ["dsdr-eval", *argv]
    rebuilt = ["dsdr-eval", "report", *args.runs, "--out", args.out]
    for label in args.label:
        rebuilt += ["--label", label]
    for flag, value in (("--reference", args.reference), ("--baseline", args.baseline), ("--title", args.title)):
        if value is not None:
            rebuilt += [flag, value]
    for flag, value in (("--allow-mixed", args.allow_mixed), ("--ci", args.ci), ("--no-compare", args.no_compare)):
        if value:
            rebuilt.append(flag)
    rebuilt += ["--avg-metric", args.avg_metric, "--digits", str(args.digits), "--bootstrap", str(args.bootstrap),
                "--seed", str(args.seed)]
    for train in args.train:
        rebuilt += ["--train", train]
    if args.smoothing:
        rebuilt += ["--smoothing", str(args.smoothing)]
    return rebuilt


def main(args: argparse.Namespace) -> int:
    from dsdr_eval.api.analysis import ReportCommandOptions, run_report
    from dsdr_eval.api.options import from_namespace

    report = run_report(from_namespace(ReportCommandOptions, args), command=_command_line(args))
    skipped = [p for p in report["plots"] if p["skipped"]]
    print(f"report written to {args.out}/README.md ({len(report['files'])} files)")
    if report["mixed_protocols"]:
        print("warning: mixed protocols (--allow-mixed): " + "; ".join(report["mixed_protocols"]), file=sys.stderr)
    for plot in skipped:
        print(f"skipped {plot['name']}: {plot['skipped']}", file=sys.stderr)
    for warning in report["comparison_warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # `python -m dsdr_eval.cli.report ...` = `dsdr-eval report ...`
    from dsdr_eval.cli import main as dsdr_eval_main

    sys.exit(dsdr_eval_main(["report", *sys.argv[1:]]))
