"""`dsdr-eval audit`: the audit flags of a scored run (``dsdr_eval.grading.audit``): the counts per
benchmark from metrics.json, then the flagged samples from graded.jsonl (``dsdr_eval.scoring.audit_listing``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dsdr_eval.options import commands
from dsdr_eval.options.parser import add_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, commands.AUDIT)


def main(args: argparse.Namespace) -> int:
    from dsdr_eval.scoring.audit_listing import flagged_samples, graded_path
    from dsdr_eval.cli.score import print_audit
    from dsdr_eval.rundir import directory as rundir
    from dsdr_eval.scoring.checks import clip

    graded = graded_path(args.path)
    metrics_path = graded.parent / rundir.METRICS
    if metrics_path.is_file():
        print_audit(json.loads(metrics_path.read_text(encoding="utf-8")), title_hint=False)
    if args.limit == 0:
        return 0
    shown = 0
    for item in flagged_samples(graded, flag=args.flag, benchmark=args.benchmark, limit=args.limit):
        shown += 1
        benchmark, phase, problem_id, sample_idx = item["key"]
        print(f"\n[{', '.join(item['audit'])}] {benchmark} problem {problem_id} sample {sample_idx} "
              f"(line {item['line']}): {item['status']}")
        if item["problem"]:
            print(f"  problem:   {clip(item['problem'], 160)}")
        print(f"  gold:      {clip(item['gold'], 160)}")
        print(f"  extracted: {clip(item['extracted'], 160)} ({item['extraction'] or 'no method'})"
              f"{'' if item['finish_reason'] is None else ', finish ' + str(item['finish_reason'])}")
        print(f"  answer ends ({item['answer_chars']} chars): {clip(item['answer_end'], 300, tail=True)}")
    what = f" raising {args.flag}" if args.flag else " flagged"
    where = f" of {args.benchmark}" if args.benchmark else ""
    print(f"\n{shown} samples{where}{what} listed (--limit {args.limit}) from {Path(graded)}")
    return 0
