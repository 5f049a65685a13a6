"""``dsdr-eval sweep``: evaluate the checkpoints of a training run, one run directory each (resumable).

    dsdr-eval sweep TRAIN_RUN --out SWEEP_DIR [--every K] [--include-final] [dsdr-eval run options]

Each selected checkpoint is evaluated by the code of ``dsdr-eval run`` (``dsdr_eval.api.sweeping.run_sweep``
calls ``run_evaluation``) into SWEEP_DIR/<checkpoint name>/; SWEEP_DIR/sweep.json (``dsdr_eval.rundir.sweepdir``) records the training run,
the checkpoints with their steps and status, and the evaluation settings. A rerun skips finished
checkpoints and resumes a partial one through ``run``'s own resume.

Engines: every checkpoint loads its own model (hf: a from_pretrained per checkpoint, seconds for a
small model; vllm: a fresh engine per checkpoint). vLLM offers no cheap in-place swap of all weights
of a running engine for arbitrary HF dirs, so nothing is reused (docs/sweep.md).
"""

from __future__ import annotations

import argparse

from dsdr_eval.cli import run as run_cli
from dsdr_eval.options import commands
from dsdr_eval.options.parser import add_options
from dsdr_eval.errors import DsdrError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, commands.SWEEP)


def main(args: argparse.Namespace) -> int:
    from dsdr_eval.cli.args import from_namespace
    from dsdr_eval.api.sweeping import run_sweep

    if args.model is not None:
        raise DsdrError("--model: a sweep evaluates the checkpoints of TRAIN_RUN; drop --model")
    code, _ = run_sweep(args.train_run, from_namespace(commands.RunOptions, args), every=args.every,
                        include_final=args.include_final, on_result=run_cli.print_outcome)
    return code
