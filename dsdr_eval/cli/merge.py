"""``dsdr-eval merge``: join the shards of one run (``dsdr-eval run --shard I/N``) into one run directory.

    dsdr-eval merge RUN.shard0 RUN.shard1 ... --out RUN_DIR
    dsdr-eval score RUN_DIR && dsdr-eval diversity RUN_DIR

The checks and what is written: ``dsdr_eval.run.merge`` (docs/evaluate.md, Shards).
"""

from __future__ import annotations

import argparse
import sys

from dsdr_eval.options import commands
from dsdr_eval.options.parser import add_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, commands.MERGE)


def main(args: argparse.Namespace) -> int:
    from dsdr_eval.cli.args import from_namespace
    from dsdr_eval.run.merge import merge_shards

    options = from_namespace(commands.MergeOptions, args)
    config = merge_shards(options.shards, options.out, command=list(sys.argv))
    merged = config["merged"]
    n_samples = sum(shard["n_samples"] for shard in merged["shards"])
    print(f"merged {merged['n_shards']} shards ({n_samples} samples) into {options.out}; grade and score it with "
          f"`dsdr-eval score {options.out}`, then `dsdr-eval diversity {options.out}`")
    return 0


if __name__ == "__main__":  # `python -m dsdr_eval.cli.merge ...` = `dsdr-eval merge ...`
    from dsdr_eval.cli import main as dsdr_eval_main

    sys.exit(dsdr_eval_main(["merge", *sys.argv[1:]]))
