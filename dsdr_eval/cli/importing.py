"""`dsdr-eval import`: another tool's result file becomes a run directory (samples.jsonl + config.json)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dsdr_eval.options import commands
from dsdr_eval.options.parser import add_options
from dsdr_eval.errors import warn


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, commands.IMPORT)


def main(args: argparse.Namespace) -> int:
    from dsdr_eval.api.analysis import run_import
    from dsdr_eval.cli.args import from_namespace
    from dsdr_eval.importers.write import MATCH_WARN_BELOW

    done = run_import(from_namespace(commands.ImportOptions, args), command=["dsdr-eval", *sys.argv[1:]])
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
