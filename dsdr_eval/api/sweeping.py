"""``dsdr-eval sweep`` as a library call: evaluate the checkpoints of a training run, one run directory
each, through ``run_evaluation`` (the same code as ``dsdr-eval run``); SWEEP_DIR/sweep.json
(``dsdr_eval.rundir.sweepdir``) records them. A rerun skips finished checkpoints and resumes a partial one.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable

from dsdr_eval.rundir import sweepdir

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.run.evaluation import run_evaluation
from dsdr_eval.run.finish import RunOutcome
from dsdr_eval.run.generate import EngineFactory
from dsdr_eval.options.commands import RunOptions
from dsdr_eval.errors import DsdrError

# Run options that are per checkpoint or per call, not settings of the sweep's numbers.
_NOT_IDENTITY = {"model", "out", "label", "no_progress"}


def eval_settings(options: RunOptions) -> dict[str, Any]:
    """The run options of this sweep (every `dsdr-eval run` option but the per-checkpoint ones), sorted."""
    values = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    return {k: v for k, v in sorted(values.items()) if k not in _NOT_IDENTITY}


def run_sweep(train_run: str | Path, options: RunOptions, *, every: int = 1, include_final: bool = False,
              command: list[str] | None = None, engine: EngineFactory | None = None,
              on_result: Callable[[RunOutcome], None] | None = None) -> tuple[int, dict[str, Any]]:
    """Evaluate the selected checkpoints of ``train_run`` into ``options.out`` (the sweep directory) with
    ``options`` (its ``model`` is ignored: each checkpoint is the model). ``on_result`` sees each finished
    evaluation (the CLI prints its summary). Returns the worst exit code (0 done, 1 samples missing,
    2 a checkpoint failed) and the sweep.json record."""
    if options.backend == "openai":
        raise DsdrError("--backend openai: a sweep loads each checkpoint itself; use --backend hf, vllm or auto")
    command = list(sys.argv if command is None else command)  # what each run records as its command too
    train_run, sweep_dir = Path(train_run), Path(options.out)
    checkpoints = sweepdir.list_checkpoints(train_run, every=every, include_final=include_final)
    settings = eval_settings(options)
    with rundir.writer_lock(sweep_dir):  # one sweep per SWEEP_DIR (each checkpoint's run locks its own)
        if (sweep_dir / sweepdir.SWEEP_FILE).exists():
            record = sweepdir.load_sweep(sweep_dir)
            sweepdir.check_settings(record, settings, sweep_dir)
            record.update(every=every, include_final=include_final)
        else:
            record = sweepdir.new_record(train_run, settings, label=options.label, every=every,
                                      include_final=include_final, command=command)
        sweepdir.merge_checkpoints(record, checkpoints)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        sweepdir.save_sweep(sweep_dir, record)
        code = _evaluate(options, record, sweep_dir, command, engine, on_result)
    done = sum(e["status"] == "done" for e in record["checkpoints"])
    print(f"sweep: {done} of {len(record['checkpoints'])} checkpoints evaluated; {sweep_dir / sweepdir.SWEEP_FILE}")
    return code, record


def _evaluate(options: RunOptions, record: dict[str, Any], sweep_dir: Path, command: list[str],
              engine: EngineFactory | None, on_result: Callable[[RunOutcome], None] | None) -> int:
    """Evaluate every checkpoint not yet done; sweep.json is saved after each. Returns the worst exit code."""
    worst = 0
    pending = [e for e in record["checkpoints"] if not sweepdir.is_done(record, sweep_dir, e["run_dir"])]
    skipped = len(record["checkpoints"]) - len(pending)
    if skipped:
        print(f"sweep: {skipped} of {len(record['checkpoints'])} checkpoints already evaluated; skipped")
    for index, entry in enumerate(pending, 1):
        print(f"sweep: [{index}/{len(pending)}] {entry['name']} (step {entry['step']}) -> {sweep_dir / entry['run_dir']}")
        one = dataclasses.replace(options, model=entry["model"], out=str(sweep_dir / entry["run_dir"]),
                                  label=f"{record['label']} {entry['name']}")
        try:  # config.json's command: the sweep's (this checkpoint's model/out are in config.json)
            result = run_evaluation(one, command=command, engine=engine)
            if on_result is not None:
                on_result(result)
        except Exception as exc:  # one bad checkpoint (bad config, truncated weights ...): recorded, the others still run
            message = str(exc) if isinstance(exc, DsdrError) else f"{type(exc).__name__}: {exc}"
            message = " ".join(message.split())[:2000]  # one line in sweep.json and on stderr
            print(f"error: {entry['name']}: {message}", file=sys.stderr)
            sweepdir.set_status(record, entry["run_dir"], "error", message)
            worst = max(worst, 2)
        else:
            status = "done" if result.exit_code == 0 else "incomplete"
            sweepdir.set_status(record, entry["run_dir"], status,
                             None if status == "done" else f"{result.n_missing} samples missing; rerun to retry")
            worst = max(worst, result.exit_code)
        sweepdir.save_sweep(sweep_dir, record)
    return worst
