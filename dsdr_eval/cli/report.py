"""``dsdr-eval report RUN_DIR [RUN_DIR ...] --out reports/NAME``: tables, plots and paired comparisons.

The work is ``dsdr_eval.api.analysis.run_report`` (matplotlib and numpy are imported when it runs, so
``dsdr-eval --help`` stays fast); this module parses, calls it and prints what it wrote.
"""

from __future__ import annotations

import argparse
import sys

from dsdr_eval.options import commands
from dsdr_eval.options.parser import add_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = commands.REPORT_DESCRIPTION
    add_options(parser, commands.REPORT)


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
    from dsdr_eval.api.analysis import run_report
    from dsdr_eval.cli.args import from_namespace

    report = run_report(from_namespace(commands.ReportOptions, args), command=_command_line(args))
    skipped = [p for p in report["plots"] if p["skipped"]]
    print(f"report written to {args.out}/README.md ({len(report['files'])} files)")
    if report["truncation"]:
        print("truncation (% of samples that hit max tokens / whose reasoning never closed):")
        for item in report["truncation"]:
            print(f"  {item['run']}, {item['benchmark']}: "
                  + " / ".join("-" if x is None else f"{100 * x:.1f}%"
                               for x in (item["hit_max_tokens"], item["unclosed_reasoning"])))
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
