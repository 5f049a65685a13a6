"""``dsdr-eval sweep``: evaluate the checkpoints of a training run, one run directory each (resumable).

    dsdr-eval sweep TRAIN_RUN --out SWEEP_DIR [--every K] [--include-final] [dsdr-eval run options]

Each selected checkpoint is evaluated by ``dsdr-eval run`` itself (``run_from_args``) into
SWEEP_DIR/<checkpoint name>/; SWEEP_DIR/sweep.json (``dsdr_eval.sweep``) records the training run,
the checkpoints with their steps and status, and the evaluation settings. A rerun skips finished
checkpoints and resumes a partial one through ``run``'s own resume.

Engines: every checkpoint loads its own model (hf: a from_pretrained per checkpoint, seconds for a
small model; vllm: a fresh engine per checkpoint). vLLM offers no cheap in-place swap of all weights
of a running engine for arbitrary HF dirs, so nothing is reused (docs/sweep.md).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

from dsdr_eval import sweep

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.cli import run as run_cli
from dsdr_eval.cli.args import integer
from dsdr_eval.errors import DsdrError

_NOT_IDENTITY = {"train_run", "every", "include_final", "model", "out", "label", "no_progress", "command"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("train_run", metavar="TRAIN_RUN", help="a dsdr-train run directory (config.json kind=train)")
    sweep_group = parser.add_argument_group("which checkpoints")
    sweep_group.add_argument("--every", type=integer(1), default=1,
                             help="evaluate every K-th checkpoints/step_XXXXXX/ by step, from the first (default 1)")
    sweep_group.add_argument("--include-final", action="store_true", help="also evaluate final/")
    run_cli.add_arguments(parser)
    # The model of each evaluation is a checkpoint; --out is the sweep directory.
    model = parser._option_string_actions["--model"]
    model.required, model.help = False, argparse.SUPPRESS
    parser._option_string_actions["--out"].help = "sweep directory: one run directory per checkpoint + sweep.json"
    parser._option_string_actions["--label"].help = "label of the sweep (default: the training run's); " \
                                                    "each run is labelled '<label> <checkpoint>'"


def eval_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The run options of this sweep (every `dsdr-eval run` option but the per-checkpoint ones)."""
    return {k: v for k, v in sorted(vars(args).items()) if k not in _NOT_IDENTITY}


def _checkpoint_args(args: argparse.Namespace, ckpt: dict[str, Any], sweep_dir: Path, label: str) -> argparse.Namespace:
    one = copy.copy(args)
    one.model, one.out, one.label = ckpt["model"], str(sweep_dir / ckpt["run_dir"]), f"{label} {ckpt['name']}"
    return one


def _evaluate(args: argparse.Namespace, record: dict[str, Any], sweep_dir: Path, command: list[str]) -> int:
    """Evaluate every checkpoint not yet done; sweep.json is saved after each. Returns the worst exit code."""
    worst = 0
    pending = [e for e in record["checkpoints"] if not sweep.is_done(record, sweep_dir, e["run_dir"])]
    skipped = len(record["checkpoints"]) - len(pending)
    if skipped:
        print(f"sweep: {skipped} of {len(record['checkpoints'])} checkpoints already evaluated; skipped")
    for index, entry in enumerate(pending, 1):
        print(f"sweep: [{index}/{len(pending)}] {entry['name']} (step {entry['step']}) -> {sweep_dir / entry['run_dir']}")
        one = _checkpoint_args(args, entry, sweep_dir, record["label"])
        try:  # config.json's command: the sweep's (this checkpoint's --model/--out are in config.json)
            result = run_cli.run_from_args(one, argv=command)
        except Exception as exc:  # one bad checkpoint (bad config, truncated weights ...): recorded, the others still run
            message = str(exc) if isinstance(exc, DsdrError) else f"{type(exc).__name__}: {exc}"
            message = " ".join(message.split())[:2000]  # one line in sweep.json and on stderr
            print(f"error: {entry['name']}: {message}", file=sys.stderr)
            sweep.set_status(record, entry["run_dir"], "error", message)
            worst = max(worst, 2)
        else:
            status = "done" if result.exit_code == 0 else "incomplete"
            sweep.set_status(record, entry["run_dir"], status,
                             None if status == "done" else f"{result.n_missing} samples missing; rerun to retry")
            worst = max(worst, result.exit_code)
        sweep.save_sweep(sweep_dir, record)
    return worst


def main(args: argparse.Namespace) -> int:
    command = list(sys.argv)  # what `run` records as its command too
    if args.model is not None:
        raise DsdrError("--model: a sweep evaluates the checkpoints of TRAIN_RUN; drop --model")
    if args.backend == "openai":
        raise DsdrError("--backend openai: a sweep loads each checkpoint itself; use --backend hf, vllm or auto")
    train_run, sweep_dir = Path(args.train_run), Path(args.out)
    checkpoints = sweep.list_checkpoints(train_run, every=args.every, include_final=args.include_final)
    settings = eval_settings(args)
    with rundir.writer_lock(sweep_dir):  # one sweep per SWEEP_DIR (each checkpoint's run locks its own)
        return _sweep_locked(args, train_run, sweep_dir, checkpoints, settings, command)


def _sweep_locked(args: argparse.Namespace, train_run: Path, sweep_dir: Path, checkpoints: list[Any],
                  settings: dict[str, Any], command: list[str]) -> int:
    if (sweep_dir / sweep.SWEEP_FILE).exists():
        record = sweep.load_sweep(sweep_dir)
        sweep.check_settings(record, settings, sweep_dir)
        record.update(every=args.every, include_final=args.include_final)
    else:
        record = sweep.new_record(train_run, settings, label=args.label, every=args.every,
                                  include_final=args.include_final, command=command)
    sweep.merge_checkpoints(record, checkpoints)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    sweep.save_sweep(sweep_dir, record)
    code = _evaluate(args, record, sweep_dir, command)
    done = sum(e["status"] == "done" for e in record["checkpoints"])
    print(f"sweep: {done} of {len(record['checkpoints'])} checkpoints evaluated; {sweep_dir / sweep.SWEEP_FILE}")
    return code
