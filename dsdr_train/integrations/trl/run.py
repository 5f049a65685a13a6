"""``dsdr-train --engine trl``: one run on TRL's GRPOTrainer with the compact trainer's contract.

Same config keys, data loading and prompt templates (the compact trainer's own code:
``Trainer._load_prompt_pool``, ``Trainer._build_diversity``, ``Trainer._save_config``), and the
same run directory: ``config.json`` (``"engine": "trl"`` and the engine's library versions),
``metrics.jsonl`` (one record per compact step, the compact trainer's keys), ``checkpoints/``
(TRL's ``checkpoint-N``: weights, tokenizer, optimizer, scheduler, RNG, data position) and
``final/`` (an HF directory ``dsdr-eval run --model RUN/final`` loads). ``--resume`` continues
from the newest ``checkpoints/checkpoint-N`` through TRL's ``resume_from_checkpoint``.

Launch on several GPUs / nodes with accelerate (README "Training on TRL (multi-GPU)")::

    accelerate launch --config_file dsdr_train/configs/accelerate/zero2.yaml -m dsdr_train.cli \\
        --engine trl --algo dsdr --model ... --train-data ... --out RUN
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dsdr_eval.errors import DsdrError
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
    folder = run_dir / "checkpoints"
    found = [(int(p.name.split("-")[1]), p) for p in folder.glob("checkpoint-*")
             if p.name.split("-")[1].isdigit() and (p / "trainer_state.json").exists()] if folder.is_dir() else []
    return str(max(found)[1]) if found else None


def build_trainer(cfg: TrainConfig, *, model_path: str, run_dir: Path, init_path: str | None = None) -> Any:
    """The ``DsdrGRPOTrainer`` of ``cfg`` (also used by the tests and the benchmark) and the
    context the compact trainer's helpers ran on (template, chat mode, encoder)."""
    import torch
    from accelerate import PartialState
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from dsdr_train.integrations.trl.mapping import geometry, grpo_config_kwargs, rollout_choice
    from dsdr_train.integrations.trl.trainer import DsdrGRPOTrainer, DsdrSetup
    from dsdr_train.modeling import load_policy, pick_device, pick_dtype
    from dsdr_train.train import Trainer

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
    ctx = SimpleNamespace(cfg=cfg, tokenizer=tokenizer, dist=SimpleNamespace(main=state.is_main_process),
                          device=torch.device(device), run_dir=run_dir)
    ctx.engine_choice = rollout_choice(cfg, cuda_available=torch.device(device).type == "cuda")  # config.json
    pool = Trainer._load_prompt_pool(ctx)  # the compact trainer's data loading and prompt rendering
    ctx.encoder, ctx.equivalence = Trainer._build_diversity(ctx)
    texts = [tokenizer.decode(ids) for ids in pool.prompt_ids]
    dataset = Dataset.from_dict({"prompt": texts, "problem_idx": list(range(len(texts)))})
    setup = DsdrSetup(cfg=cfg, problems=pool.problems, prompt_ids=dict(zip(texts, pool.prompt_ids)), geometry=geo,
                      encoder=ctx.encoder, equivalence=ctx.equivalence)
    if cfg.tensorboard:  # transformers' TensorBoardCallback reads its directory from the environment
        os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(run_dir / "tensorboard"))
    args = GRPOConfig(**grpo_config_kwargs(cfg, geo, run_dir, device_type=torch.device(device).type))
    model = load_policy(init_path or model_path, pick_dtype(cfg, torch.device(device)),
                        disable_dropout=cfg.disable_dropout)
    trainer = DsdrGRPOTrainer(setup=setup, model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    return trainer, ctx


def _step_logger(trainer: Any, cfg: TrainConfig, run_dir: Path) -> Any:
    """A TrainerCallback: at the end of every compact step (its last optimizer update) write the
    step's record to metrics.jsonl, hand the same numbers to TRL's reporting (report_to) and
    honour time_limit_s."""
    from transformers import TrainerCallback

    from dsdr_eval.jsonl import append_jsonl
    from dsdr_train.train import _key_order

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
                append_jsonl(run_dir / "metrics.jsonl", [{k: m[k] for k in sorted(m, key=_key_order)}])
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
    from dsdr_train.train import Trainer, prepare_metrics_for_resume

    resume_from = _last_trl_checkpoint(run_dir) if resume else None
    trainer, ctx = build_trainer(cfg, model_path=model_path, run_dir=run_dir)
    main = trainer.accelerator.is_main_process
    if main and config_record is not None:
        Trainer._save_config(ctx, dict(config_record, engine="trl", engine_versions=engine_versions(),
                                       engine_layout={"processes": trainer.accelerator.num_processes,
                                                      "distributed_type": str(trainer.accelerator.distributed_type),
                                                      **trainer.setup.geometry.__dict__}))
    per_step = trainer.setup.geometry.updates_per_step
    if resume and main:
        done = 0
        if resume_from:
            import json

            done = json.loads((Path(resume_from) / "trainer_state.json").read_text())["global_step"] // per_step
        dropped = prepare_metrics_for_resume(run_dir, done)
        print(f"resuming {run_dir} from {resume_from or 'scratch (no checkpoint yet)'} at step {done}"
              f" (dropped {dropped} metrics lines past it)", file=sys.stderr)
    trainer.add_callback(_step_logger(trainer, cfg, run_dir))
    trainer.train(resume_from_checkpoint=resume_from)
    scoring.close_grading_pools()
    final = run_dir / ckpt.FINAL
    if cfg.save_final:
        trainer.save_model(str(final))  # gathers ZeRO-3 / FSDP shards; the tokenizer too
    if main:
        steps = trainer.state.global_step // per_step
        print(f"done: {steps} steps (engine trl); final checkpoint {final}; metrics {run_dir / 'metrics.jsonl'}",
              file=sys.stderr)
    return 0
