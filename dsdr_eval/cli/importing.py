"""`dsdr-eval import`: another tool's result file becomes a run directory (samples.jsonl + config.json)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dsdr_eval.cli.args import add_reasoning_format_argument, integer, nonempty, output_dir
from dsdr_eval.errors import warn

FORMATS = ("lm-eval", "lighteval", "qwen-math", "verl", "openai-batch", "jsonl")  # dsdr_eval.importers.IMPORTERS (not imported for --help)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="tool", default="auto", choices=("auto", *FORMATS),
                        help="the source format (default auto: detected from the file's content; an explicit "
                             "format another one fits better is refused, naming that one): lm-eval "
                             "(--log_samples samples_<task>_<date>.jsonl), lighteval "
                             "(details_<task>_<date>.parquet), qwen-math "
                             "(Qwen2.5-Math math_eval.py output), verl (trainer.validation_data_dir dump: a "
                             "<step>.jsonl or the directory), openai-batch (a Batch API output file, with "
                             "--batch-input and --benchmark), jsonl (any JSONL, with the field options below)")
    parser.add_argument("path", metavar="PATH", help="the source file, or a tool's output directory: every "
                        "result file of lm-eval / lighteval / Qwen math_eval.py in it, one benchmark each (verl: "
                        "one step's dump, --step)")
    parser.add_argument("--out", required=True, type=output_dir, metavar="RUN_DIR",
                        help="the run directory to write (must not already hold samples.jsonl)")
    parser.add_argument("--benchmark", type=nonempty, metavar="NAME",
                        help="benchmark name of the samples (default: the source's task / data set name, matched "
                             "to the registered benchmark it names, else 'default'); a registered benchmark or a "
                             "benchmark .jsonl also matches problems by text and takes its ids, gold answers and "
                             "grading metadata")
    parser.add_argument("--data-dir", metavar="DIR", help="benchmark JSONL directory for --benchmark "
                        "(default $DSDR_DATA_DIR)")
    parser.add_argument("--label", type=nonempty, help="run label for reports (default: the directory name)")
    parser.add_argument("--strict", action="store_true", help="stop at the first record with an unusable gold "
                        "answer (default: skip such records with one warning, listed in config.json)")
    parser.add_argument("--extraction", type=nonempty, metavar="PROFILE", help="the answer extraction profile to "
                        "grade with (default: the one the source tool used for the task, recorded in config.json)")
    add_reasoning_format_argument(parser, "default auto; recorded in config.json for `score`")
    parser.add_argument("--lm-eval-filter", metavar="NAME", help="lm-eval: the filter whose lines to import "
                        "(default: the first in the file)")
    parser.add_argument("--step", type=integer(0), help="verl with a directory: the step to import (default: the last)")
    parser.add_argument("--batch-input", metavar="FILE", help="openai-batch: the batch's input file (prompts and "
                        "sampling settings by custom_id)")
    group = parser.add_argument_group("jsonl field mapping (dotted paths reach nested fields: doc.answer)")
    group.add_argument("--id-field", default="id", type=nonempty, help="problem id (default id)")
    group.add_argument("--gold-field", default="answer", type=nonempty, help="gold answer (default answer)")
    group.add_argument("--completion-field", default="completion", type=nonempty,
                       help="a completion, or a list of them (default completion)")
    group.add_argument("--problem-field", default="problem", type=nonempty, help="problem text (default problem)")
    group.add_argument("--prompt-field", type=nonempty, help="prompt sent to the model (default: none)")
    group.add_argument("--correct-field", type=nonempty,
                       help="the source's verdict: true/false or 0/1, or a list per completion (default: none)")


def main(args: argparse.Namespace) -> int:
    from dsdr_eval.api.analysis import ImportOptions, run_import
    from dsdr_eval.api.options import from_namespace
    from dsdr_eval.importers.write import MATCH_WARN_BELOW

    done = run_import(from_namespace(ImportOptions, args), command=["dsdr-eval", *sys.argv[1:]])
    source = done.config["source"]
    print(f"imported {done.n_samples} completions of {done.n_problems} problems from {source['tool']} "
          f"{source['version'] or '(version unknown)'} as benchmark {done.benchmark!r}; {_verdicts(done)}")
    for match in done.matching:
        share = match["n_matched"] / match["n_problems"] if match["n_problems"] else 0.0
        how = f" (inferred: {match['inferred']})" if match["inferred"] else ""
        print(f"benchmark {match['benchmark']}{how}: {match['n_matched']} of {match['n_problems']} source problems "
              f"matched to the registry, {match['n_problems'] - match['n_matched']} unmatched" +
              (f" ({match['n_similar']} of them by similar text and the same gold, word overlap >= "
               f"{match['least_overlap']:.0%}: config.json)" if match["n_similar"] else ""))
        if share < MATCH_WARN_BELOW:
            warn(f"only {share:.0%} of the source's {match['benchmark']} problems matched the registry (below "
                 f"{MATCH_WARN_BELOW:.0%}): unmatched problems keep the source's ids and golds and do not pair "
                 "with `dsdr-eval run` runs")
    print(f"answer extraction: {done.config['extraction']} (config.json 'extraction'; --extraction overrides)")
    unknown = [name for name, value in source["sampling"].items() if value == "unknown"]
    if unknown:
        print(f"not recorded by the source: {', '.join(unknown)}")
    for block in source.get("files", [source]):
        prefix = f"{Path(block['file']).name}: " if "files" in source else ""
        for note in block["notes"]:
            print(f"note: {prefix}{note}")
    print(f"wrote {Path(args.out) / 'samples.jsonl'} and config.json; next: dsdr-eval score {args.out}")
    return 0


def _verdicts(done: Any) -> str:
    """How many completions carry the source's verdict, or that the source file has none to carry."""
    blocks = done.config["source"].get("files", [done.config["source"]])
    if done.n_labels:
        return f"{done.n_labels} carry the source's verdict (source_correct)"
    if all(block["verdict_field"] is None for block in blocks):
        return "the source file has no verdict field (no source_correct; `score` grades them all)"
    return (f"none carries the source's verdict (source_correct): its {blocks[0]['verdict_field']!r} is not a per-"
            "completion verdict here (see the notes)")
