"""``dsdr-train --engine trl``: one run on TRL's GRPOTrainer with the compact trainer's contract.

Same config keys, data loading and prompt templates (the functions of :mod:`dsdr_train.setup` the
compact trainer calls too: ``load_prompt_pool``, ``build_diversity``, ``save_run_config``), and the
same run directory: ``config.json`` (``"engine": "trl"`` and the engine's library versions),
``metrics.jsonl`` (one record per compact step, the compact trainer's keys), ``checkpoints/``
(TRL's ``checkpoint-N``: weights, tokenizer, optimizer, scheduler, RNG, data position) and
``final/`` (an HF directory ``dsdr-eval run --model RUN/final`` loads). ``--resume`` continues
from the newest ``checkpoints/checkpoint-N`` through TRL's ``resume_from_checkpoint``.

Launch on several GPUs / nodes with accelerate (docs/training.md, "The TRL engine")::

    accelerate launch --config_file dsdr_train/configs/accelerate/zero2.yaml -m dsdr_train.cli \\
        --engine trl --algo dsdr --model ... --train-data ... --out RUN
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.checkpoints import CHECKPOINTS, FINAL
from dsdr_eval.rundir.directory import TRAIN_METRICS
from dsdr_train.config import TrainConfig


def engine_versions() -> dict[str, str]:
    import accelerate
    import torch
    import transformers
    import trl

    return {"trl": trl.__version__, "transformers": transformers.__version__, "accelerate": accelerate.__version__,
            "torch": torch.__version__}


def _check_supported(cfg: TrainConfig) -> None:
    if cfg.val_data:
        raise DsdrError("config key 'val_data': not supported with engine=trl; evaluate RUN/checkpoints/* or "
                        "RUN/final with dsdr-eval run")
    if cfg.check_on_policy:
        raise DsdrError("config key 'check_on_policy': compact engine only (hf rollouts)")


def _last_trl_checkpoint(run_dir: Path) -> str | None:
    """The newest COMPLETE ``checkpoints/checkpoint-N`` (trainer_state.json is written last: a run
    killed while saving leaves a folder without it, which is skipped and later overwritten)."""
    folder = run_dir / CHECKPOINTS
    found = [(int(p.name.split("-")[1]), p) for p in folder.glob("checkpoint-*")
             if p.name.split("-")[1].isdigit() and (p / "trainer_state.json").exists()] if folder.is_dir() else []
    return str(max(found)[1]) if found else None


# files of a TRL checkpoint-N that are training state, not the HF model directory final/ is
_TRAINING_STATE = ("optimizer.pt", "scheduler.pt", "rng_state*.pth", "trainer_state.json", "training_args.bin",
                   "global_step*", "latest", "zero_to_fp32.py", "dsdr_*.json")


def _last_logged_step(run_dir: Path) -> int:
    """The largest ``step`` in metrics.jsonl (0 when none; a torn last line is ignored)."""
    import json

    path, last = run_dir / TRAIN_METRICS, 0
    if path.is_file():
        for line in path.read_text(errors="replace").splitlines():
            try:
                last = max(last, int(json.loads(line)["step"]))
            except (ValueError, KeyError, TypeError):
                continue
    return last


def _finish_without_training(cfg: TrainConfig, run_dir: Path, resume_from: str | None, steps: int, main: bool) -> int:
    """``--resume`` of a run that already trained ``total_steps``: train nothing, keep final/ as it is;
    only when final/ is missing (killed while it was written, which happens in final.tmp) write it from
    the newest checkpoint, which then holds the last step's weights."""
    from dsdr_train import checkpoint as ckpt

    final = run_dir / FINAL
    if main and cfg.save_final and not final.is_dir():
        if resume_from is None:
            raise DsdrError(f"{run_dir}: {steps} steps logged but neither final/ nor a checkpoint to rebuild it from")
        import shutil

        staged = final.with_name(final.name + ".tmp")
        shutil.rmtree(staged, ignore_errors=True)
        # the checkpoint's HF files as they are (weights, config, tokenizer), not TRL's training state
        shutil.copytree(resume_from, staged, ignore=shutil.ignore_patterns(*_TRAINING_STATE))
        ckpt.replace_dir(staged, final)
        print(f"final/ was missing (interrupted while written): rebuilt from {resume_from}", file=sys.stderr)
    if main:
        print(f"done: {steps} steps (engine trl); nothing left to train (total_steps={cfg.total_steps}); "
              f"final checkpoint {final}; metrics {run_dir / TRAIN_METRICS}", file=sys.stderr)
    return 0


def build_trainer(cfg: TrainConfig, *, model_path: str, run_dir: Path, init_path: str | None = None) -> Any:
    """The ``DsdrGRPOTrainer`` of ``cfg`` (also used by the tests and the benchmark); its ``setup``
    holds what config.json records (prompt format, rollout engine choice, diversity models)."""
    import torch
    from accelerate import PartialState
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from dsdr_train.integrations.trl.mapping import geometry, grpo_config_kwargs, rollout_choice
    from dsdr_train.integrations.trl.trainer import DsdrGRPOTrainer, DsdrSetup
    from dsdr_train.modeling import load_policy, pick_device, pick_dtype
    from dsdr_train.setup import build_diversity, load_prompt_pool, prompt_format

    _check_supported(cfg)
    # cpu=True without a GPU: processes started by torchrun / accelerate launch then join a gloo
    # group (MULTI_CPU) instead of running as independent single processes.
    state = PartialState(cpu=cfg.device == "cpu" or not torch.cuda.is_available())
    device = pick_device(cfg) if cfg.device != "auto" else state.device
    geo = geometry(cfg, state.num_processes)
    tokenizer = AutoTokenizer.from_pretrained(init_path or model_path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    prompts = prompt_format(cfg, tokenizer)
    pool = load_prompt_pool(cfg, prompts, main=state.is_main_process)  # the compact trainer's data and prompts
    texts = [tokenizer.decode(ids) for ids in pool.prompt_ids]
    dataset = Dataset.from_dict({"prompt": texts, "problem_idx": list(range(len(texts)))})
    setup = DsdrSetup(cfg=cfg, problems=pool.problems, prompt_ids=dict(zip(texts, pool.prompt_ids)), geometry=geo,
                      prompts=prompts, diversity=build_diversity(cfg, torch.device(device)),
                      rollout_engine=rollout_choice(cfg, cuda_available=torch.device(device).type == "cuda"))
    if cfg.tensorboard:  # transformers' TensorBoardCallback reads its directory from the environment
        os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(run_dir / "tensorboard"))
    args = GRPOConfig(**grpo_config_kwargs(cfg, geo, run_dir, device_type=torch.device(device).type))
    model = load_policy(init_path or model_path, pick_dtype(cfg, torch.device(device)),
                        disable_dropout=cfg.disable_dropout)
    return DsdrGRPOTrainer(setup=setup, model=model, args=args, train_dataset=dataset, processing_class=tokenizer)


def _step_logger(trainer: Any, cfg: TrainConfig, run_dir: Path) -> Any:
    """A TrainerCallback: at the end of every compact step (its last optimizer update) write the
    step's record to metrics.jsonl, hand the same numbers to TRL's reporting (report_to) and
    honour time_limit_s."""
    from transformers import TrainerCallback

    from dsdr_eval.rundir.jsonl import append_jsonl
    from dsdr_train.stats import ordered_metrics

    per_step = trainer.setup.geometry.updates_per_step
    started = time.perf_counter()

    class StepLogger(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            if state.global_step % per_step:
                return control
            m = trainer.step_metrics(state.global_step // per_step)
            for key, value in m.items():
                if key != "step" and isinstance(value, (int, float)):
                    trainer._metrics["train"][f"dsdr/{key}"].append(float(value))
            if state.is_world_process_zero:
                append_jsonl(run_dir / TRAIN_METRICS, [ordered_metrics(m)])
            if cfg.time_limit_s is not None and time.perf_counter() - started > cfg.time_limit_s:
                print(f"time_limit_s={cfg.time_limit_s} reached after step {m['step']}; stopping", file=sys.stderr)
                control.should_training_stop = True
            return control

    return StepLogger()


def run_trl(cfg: TrainConfig, *, model_path: str, run_dir: Path, resume: bool,
            config_record: dict[str, Any] | None) -> int:
    """Train ``cfg`` on TRL (see the module docstring); the CLI's exit code."""
    from dsdr_train import checkpoint as ckpt
    from dsdr_train import scoring
    from dsdr_train.checkpoint import prepare_metrics_for_resume
    from dsdr_train.setup import save_run_config

    resume_from = _last_trl_checkpoint(run_dir) if resume else None
    trainer = build_trainer(cfg, model_path=model_path, run_dir=run_dir)
    main = trainer.accelerator.is_main_process
    if main and config_record is not None:
        setup = trainer.setup
        record = dict(config_record, engine="trl", engine_versions=engine_versions(),
                      engine_layout={"processes": trainer.accelerator.num_processes,
                                     "distributed_type": str(trainer.accelerator.distributed_type),
                                     **setup.geometry.__dict__})
        save_run_config(run_dir, record, cfg=cfg, prompts=setup.prompts, rollout_engine=setup.rollout_engine.to_config(),
                        diversity=setup.diversity)
    per_step = trainer.setup.geometry.updates_per_step
    if resume:
        done = 0
        if resume_from:
            import json

            done = json.loads((Path(resume_from) / "trainer_state.json").read_text())["global_step"] // per_step
        # A finished run: its newest checkpoint is at total_steps, or final/ (written last, atomically)
        # exists beside a log of every step. TRL would train another step from there.
        logged = _last_logged_step(run_dir)
        finished_final = (run_dir / FINAL).is_dir() and logged >= cfg.total_steps
        if done >= cfg.total_steps or finished_final:
            return _finish_without_training(cfg, run_dir, resume_from, max(done, logged if finished_final else 0),
                                            main)
    if resume and main:
        dropped = prepare_metrics_for_resume(run_dir, done)
        print(f"resuming {run_dir} from {resume_from or 'scratch (no checkpoint yet)'} at step {done}"
              f" (dropped {dropped} metrics lines past it)", file=sys.stderr)
    trainer.add_callback(_step_logger(trainer, cfg, run_dir))
    trainer.train(resume_from_checkpoint=resume_from)
    scoring.close_grading_pools()
    final = run_dir / FINAL
    if cfg.save_final:
        # gathers ZeRO-3 / FSDP shards (every process), the tokenizer too; written beside final/ and
        # renamed into place, so a kill leaves no partial final/ (the resume rebuilds it)
        staged = final.with_name(final.name + ".tmp")
        if main:
            import shutil

            shutil.rmtree(staged, ignore_errors=True)  # a stale one from a kill
        trainer.accelerator.wait_for_everyone()
        trainer.save_model(str(staged))
        trainer.accelerator.wait_for_everyone()
        if main:
            ckpt.replace_dir(staged, final)
    if main:
        steps = trainer.state.global_step // per_step
        print(f"done: {steps} steps (engine trl); final checkpoint {final}; metrics {run_dir / TRAIN_METRICS}",
              file=sys.stderr)
    return 0
