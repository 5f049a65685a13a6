"""`dsdr-train`: train a policy with GRPO / DAPO / DSDR (+ ablations) / DARLING.

    dsdr-train --algo dsdr --model smollm2-135m --train-data data.jsonl --out runs/x \\
        [--config FILE.yaml | --config NAME] [key=value ...] [--resume]
    dsdr-train --help-config      # every config field with its help text
    dsdr-train --where [NAME]     # where the shipped configs / scripts are (accelerate/zero2, verl/paper_runs.sh)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from dsdr_eval.options.parser import OneLineParser, add_options
from dsdr_eval.options.checks import integer
from dsdr_eval.options.schema import FLAG, Option
from dsdr_eval.errors import DsdrError, os_error_line
from dsdr_eval.rundir.checkpoints import CHECKPOINTS
from dsdr_eval.rundir.directory import TRAIN_METRICS


def options() -> tuple[Option, ...]:
    """The options of dsdr-train, declared once (the parser and tests/test_docs.py read them)."""
    from dsdr_train.config import ALGOS

    return (
        Option("algo", "--algo", choices=tuple(ALGOS), help="objective (default grpo, or the YAML's algo)"),
        Option("model", "--model", help="policy: HF dir, hub id or alias (smollm2-135m)"),
        Option("train_data", "--train-data", help="JSONL with problem/answer, or a hub dataset id"),
        Option("out", "--out", help="run directory"),
        Option("engine", "--engine", choices=("compact", "trl"),
               help="training engine: compact (default) | trl (TRL GRPOTrainer under accelerate launch)"),
        Option("config", "--config", help="YAML file of config keys, or a shipped config by name (cpu_demo, "
                                          "paper_dsdr, ...; see --where)"),
        Option("resume", "--resume", kind=FLAG, default=False,
               help="continue RUN_DIR from its last checkpoint (config read from RUN_DIR/config.json; "
                    "key=value overrides still apply, e.g. total_steps=200)"),
        Option("threads", "--threads", check=integer(1),
               help="torch threads (default: $OMP_NUM_THREADS, else the usable cores other work leaves free; "
                    "said in one line and recorded in config.json's threads)"),
        Option("help_config", "--help-config", kind=FLAG, default=False, help="print every config field and exit"),
        Option("where", "--where", nargs="?", const="", metavar="NAME",
               help="print where the shipped configs and scripts are installed, or the path of one "
                    "(e.g. accelerate/zero2, verl/paper_runs.sh) and exit"),
        Option("overrides", None, nargs="*", metavar="key=value", help="config overrides"),
    )


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="dsdr-train", description=__doc__.split("\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      epilog="Config precedence: field defaults < algorithm defaults < --config YAML < "
                             "flags < key=value overrides. See --help-config.")
    add_options(p, options())
    return p


def run(argv: list[str]) -> int:
    from dsdr_train import config as C

    # Intermixed: key=value overrides may come before, between and after the options.
    args = build_parser().parse_intermixed_args(argv)
    if args.help_config:
        print(C.help_text())
        return 0
    if args.where is not None:
        from dsdr_train.packaged import where_text

        print(where_text(args.where))
        return 0
    overrides = C.parse_overrides(args.overrides)
    cli = {"algo": args.algo, "model": args.model, "train_data": args.train_data, "out": args.out,
           "engine": args.engine}
    if args.resume:
        if not args.out:
            raise DsdrError("--resume needs --out RUN_DIR")
        from dsdr_eval.rundir.directory import load_config

        run_dir = Path(args.out)
        saved = load_config(run_dir)
        if saved.get("kind") != "train":
            raise DsdrError(f"{run_dir}/config.json: not a training run (kind={saved.get('kind')!r})")
        values = dict(saved["config"])
        for key, value in cli.items():
            if value is not None and key != "out" and value != values.get(key):
                raise DsdrError(f"--resume: --{key.replace('_', '-')} {value!r} differs from the run's {values.get(key)!r}")
        values.update(overrides)
        cfg = C.config_from_dict(values, source=f"{run_dir}/config.json")
    else:
        cfg = C.config_from_sources(yaml_path=args.config, cli=cli, overrides=overrides)
        run_dir = Path(cfg.out)
        if (run_dir / TRAIN_METRICS).exists() or (run_dir / CHECKPOINTS).exists():
            raise DsdrError(f"{run_dir}: already holds a training run; pass --resume to continue it or choose another --out")

    from dsdr_eval.rundir.directory import writer_lock

    run_dir.mkdir(parents=True, exist_ok=True)
    # one training job per run directory; each torchrun rank holds its own lock file (rundir.lock_name)
    with writer_lock(run_dir, rank=int(os.environ.get("RANK", "0") or 0)):
        return _train(args, cfg, run_dir, argv)


def _train(args: argparse.Namespace, cfg: Any, run_dir: Path, argv: list[str]) -> int:
    from dsdr_eval.models import resolve_model
    from dsdr_train import checkpoint as ckpt
    from dsdr_train.checkpoint import prepare_metrics_for_resume
    from dsdr_train.train import Trainer

    from dsdr_eval.backends.threads import set_torch_threads

    threads = set_torch_threads(args.threads, log=lambda line: print(line, file=sys.stderr)).to_record()
    if not cfg.progress:  # the libraries' own bars (weights loading, shards) too
        from dsdr_eval.progress import quiet_library_bars

        quiet_library_bars()
    resolved = resolve_model(cfg.model)
    record, resume_from = None, None
    if args.resume:
        resume_from = ckpt.latest_checkpoint(run_dir)
    else:
        record = {"kind": "train", "algo": cfg.objective.algo, "command": ["dsdr-train", *argv], "config": cfg.to_dict(),
                  "model": resolved.to_config(), "threads": threads}
    if cfg.engine == "trl":  # TRL's GRPOTrainer with the same objectives, data and run directory
        from dsdr_train.integrations.trl.run import run_trl

        return run_trl(cfg, model_path=resolved.path, run_dir=run_dir, resume=args.resume, config_record=record)
    # The trainer reads the checkpoint's trainer_state.pt (optimizer state included) once, and
    # knows the step it resumes at; only then are the metrics past that step dropped.
    trainer = Trainer(cfg, model_path=resolved.path, run_dir=run_dir, resume_from=resume_from, config_record=record)
    if args.resume and os.environ.get("RANK", "0") == "0":  # under torchrun only rank 0 touches the log
        dropped = prepare_metrics_for_resume(run_dir, trainer.step)
        print(f"resuming {run_dir} from {resume_from or 'scratch (no checkpoint yet)'} at step {trainer.step}"
              f" (dropped {dropped} metrics lines past it)", file=sys.stderr)
    final = trainer.train()
    if trainer.dist.main:
        print(f"done: {trainer.step} steps; final checkpoint {final}; metrics {run_dir / TRAIN_METRICS}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return run(argv)
    except DsdrError as exc:
        print(f"dsdr-train: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, a read-only output: one line, not a traceback
        print(f"dsdr-train: error: {os_error_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
