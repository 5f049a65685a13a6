"""The training loop (GRPO backbone + DAPO / DSDR / DARLING objectives), nanochat-sized.

One step = one rollout batch: sample prompts -> G rollouts each (one group id per prompt) ->
verifier reward (dsdr_eval.grading) -> diversity (dsdr_eval.diversity) -> shaped rewards and
group advantages (core_algos) -> PPO mini-batch updates -> metrics.jsonl -> validation /
checkpoint. Data parallel: every rank draws whole groups (prompts_per_step / world_size prompts).
All objective math lives in core_algos; grading and diversity in dsdr_eval.
"""

from __future__ import annotations

import atexit
import math
import os
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dsdr_eval.errors import DsdrError
from dsdr_eval.jsonl import append_jsonl, read_jsonl, repair_truncated_tail, write_jsonl
from dsdr_train import checkpoint as ckpt
from dsdr_train import core_algos as algos
from dsdr_train.config import TrainConfig
from dsdr_train.data import PromptSampler, TrainProblem, load_train_problems
from dsdr_train.rollout import HFRollout, RolloutBatch, VLLMRollout, sampler_ratio_deviation


class DapoExhausted(DsdrError):
    """DAPO's dynamic sampling did not fill the batch within max_num_gen_batches (dapo_exhausted=error)."""


# ----------------------------------------------------------------------------- distributed
@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed(device: torch.device) -> Dist:
    """torchrun / accelerate launch set WORLD_SIZE/RANK; gloo on CPU, nccl on GPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    import torch.distributed as tdist

    if not tdist.is_initialized():
        tdist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Dist(rank=tdist.get_rank(), world=tdist.get_world_size())


def all_reduce_values(values: list[float], dist: Dist, op: str = "sum") -> list[float]:
    """Element-wise reduction over ranks, in one collective (float64: exact for token counts)."""
    if dist.world == 1:
        return [float(v) for v in values]
    import torch.distributed as tdist

    t = torch.tensor(values, dtype=torch.float64)
    if tdist.get_backend() == "nccl":
        t = t.cuda()
    tdist.all_reduce(t, op={"sum": tdist.ReduceOp.SUM, "min": tdist.ReduceOp.MIN, "max": tdist.ReduceOp.MAX}[op])
    return [float(v) for v in t.tolist()]


def all_reduce_scalar(value: float, dist: Dist, op: str = "sum") -> float:
    if dist.world == 1:
        return value
    return all_reduce_values([value], dist, op)[0]


def gather_lists(values: list[float], dist: Dist) -> list[float]:
    if dist.world == 1:
        return values
    import torch.distributed as tdist

    out: list[Any] = [None] * dist.world
    tdist.all_gather_object(out, values)
    return [v for part in out for v in part]


# ----------------------------------------------------------------------------- model / tensors
def pick_device(cfg: TrainConfig) -> torch.device:
    if cfg.device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        return torch.device("cpu")
    return torch.device(cfg.device)


def pick_dtype(cfg: TrainConfig, device: torch.device) -> torch.dtype:
    if cfg.dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, cfg.dtype)


def load_policy(path: str, dtype: torch.dtype, *, disable_dropout: bool) -> torch.nn.Module:
    """The policy from an HF dir; with ``disable_dropout`` every dropout probability of its config
    (``attention_dropout``, ``resid_pdrop``, ...) and of its ``nn.Dropout`` modules is zeroed, so the
    update's forward is the deterministic distribution the rollouts were sampled from."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if not disable_dropout:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    config = AutoConfig.from_pretrained(path)
    for key, value in config.to_dict().items():
        if ("dropout" in key or key.endswith("pdrop")) and isinstance(value, float) and value > 0:
            setattr(config, key, 0.0)
    model = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=dtype)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Run ``model`` in eval mode (no dropout) and restore its train/eval state afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def pad_rollouts(batch: RolloutBatch, rows: list[int], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Left-padded prompts + right-padded responses: input_ids [b, P+R], response_mask [b, R]."""
    P = max(len(batch.prompt_ids[i]) for i in rows)
    R = max(max(len(batch.response_ids[i]) for i in rows), 1)
    ids = torch.full((len(rows), P + R), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for r, i in enumerate(rows):
        p, o = batch.prompt_ids[i], batch.response_ids[i]
        ids[r, P - len(p):P] = torch.tensor(p)
        ids[r, P:P + len(o)] = torch.tensor(o, dtype=torch.long)
        attn[r, P - len(p):P + len(o)] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": ids.to(device), "attention_mask": attn.to(device), "position_ids": pos.to(device),
            "response_mask": attn[:, P:].to(device).float(), "prompt_width": torch.tensor(P)}


def response_logits(model: torch.nn.Module, t: dict[str, torch.Tensor]) -> torch.Tensor:
    """Raw logits that predict each response token: [b, R, V].

    Only the last R+1 positions go through the LM head (``logits_to_keep``): with a 49k-word
    vocabulary the prompt positions' logits would dominate time and memory."""
    R = t["input_ids"].shape[1] - int(t["prompt_width"])
    logits = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"],
                   position_ids=t["position_ids"], use_cache=False, logits_to_keep=R + 1).logits
    return logits[:, -(R + 1):-1].float()


def token_log_probs(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / T)[label]: [b, R]. Rollouts were sampled at T, so the loss uses T too."""
    scaled = logits / temperature
    return scaled.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(scaled, dim=-1)


# ----------------------------------------------------------------------------- rewards
# One GradingPool per (timeout, workers) for the whole run, not fresh math-verify workers at every
# grade call: 0.33-0.66 s/step with fresh workers vs 0.006-0.013 s/step reused (30 steps of 2 problems
# x 8 ten-token SmolLM2 completions from reports/mini_experiment, shared 2-core machine; see
# `python benchmarks/stress_grading.py --step-timing`). The workers also import dsdr_eval.grading
# once, instead of re-importing whatever is on disk at every step.
_GRADING_POOLS: dict[tuple[float, int], Any] = {}


def grading_pool(cfg: TrainConfig) -> Any:
    from dsdr_eval.grading import GradingPool, default_workers

    # A step grades at most prompts_per_step problems, so more workers than that would sit idle.
    workers = cfg.grade_workers or max(1, min(default_workers(), cfg.prompts_per_step))
    key = (cfg.grade_timeout_s, workers)
    if key not in _GRADING_POOLS:
        if not _GRADING_POOLS:
            atexit.register(close_grading_pools)
        _GRADING_POOLS[key] = GradingPool(timeout_s=cfg.grade_timeout_s, workers=workers)
    return _GRADING_POOLS[key]


def close_grading_pools() -> None:
    while _GRADING_POOLS:
        _GRADING_POOLS.popitem()[1].close()


def grade(batch: RolloutBatch, problems: list[TrainProblem], cfg: TrainConfig) -> list[dict]:
    from dsdr_eval.grading import grade_samples

    rows = [{"problem_id": f"g{g}", "gold": problems[pi].answer, "completion": text}
            for g, pi, text in zip(batch.group_ids, batch.problem_idx, batch.texts)]
    return grade_samples(rows, progress=False, pool=grading_pool(cfg))


def groups_of(group_ids: list[int]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, g in enumerate(group_ids):
        out.setdefault(g, []).append(i)
    return out


def group_diversity(batch: RolloutBatch, encoder: Any, formula_rules: str = "extended"
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-rollout (d_emb, d_eq, d) of ALGORITHMS.md §3.1, each within its group (one encode call)."""
    from dsdr_eval.diversity import dsdr_diversity_batch

    div = dsdr_diversity_batch(batch.texts, batch.group_ids, encoder=encoder, formula_rules=formula_rules)
    return div.d_emb, div.d_eq, div.d


def darling_diversity(batch: RolloutBatch, graded: list[dict], equivalence: Any, cfg: TrainConfig) -> np.ndarray:
    """DARLING Div per rollout (§4) from dsdr_eval's pluggable partition (embedding threshold,
    answer+formula identity, pair classifier or judge), computed within each group."""
    from dsdr_eval.diversity import darling_div, darling_partition, formula_set

    out = np.zeros(len(batch))
    for rows in groups_of(batch.group_ids).values():
        texts = [batch.texts[i] for i in rows]
        classes = darling_partition(texts, equivalence, answer_classes=[graded[i].get("answer_class") for i in rows],
                                    formula_sets=[formula_set(t, rules=cfg.formula_rules) for t in texts])
        out[rows] = darling_div(classes, floor=cfg.darling_floor)
    return out


# ----------------------------------------------------------------------------- the trainer
class Trainer:
    def __init__(self, cfg: TrainConfig, *, model_path: str, run_dir: Path, resume_from: Path | None = None,
                 config_record: dict[str, Any] | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from dsdr_eval.prompts import encode_prompt, load_template, render_prompt, resolve_chat_mode

        self.cfg, self.run_dir = cfg, run_dir
        self.device = pick_device(cfg)
        self.dist = setup_distributed(self.device)
        if cfg.prompts_per_step % self.dist.world:
            raise DsdrError(f"config key 'prompts_per_step': {cfg.prompts_per_step} is not divisible by "
                            f"world size {self.dist.world} (whole groups per rank)")
        self.local_prompts = cfg.prompts_per_step // self.dist.world
        seed = cfg.seed + self.dist.rank
        random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)
        dtype = pick_dtype(cfg, self.device)

        init_path = str(resume_from) if resume_from else model_path
        self.tokenizer = AutoTokenizer.from_pretrained(init_path)
        self.tokenizer.padding_side = "left"
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        self.policy = load_policy(init_path, dtype, disable_dropout=cfg.disable_dropout).to(self.device)
        if cfg.gradient_checkpointing:
            self.policy.gradient_checkpointing_enable()
        self.ref = None
        if cfg.use_kl:
            self.ref = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(self.device).eval()
            self.ref.requires_grad_(False)
        self.model: torch.nn.Module = self.policy
        if self.dist.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.model = DistributedDataParallel(self.policy, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        # fused: one kernel per step and no foreach temporaries (a whole extra copy of the
        # parameters at peak); CPU and CUDA both support it for fp32/bf16 in torch >= 2.4.
        self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                           weight_decay=cfg.weight_decay, fused=True)
        warmup = max(cfg.warmup_steps, 0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda u: min(1.0, (u + 1) / warmup) if warmup else 1.0)

        # Problems and prompts: the same template/rendering as `dsdr-eval run` (dsdr_eval.prompts).
        self.problems = load_train_problems(cfg.train_data, problem_field=cfg.problem_field, answer_field=cfg.answer_field,
                                            split=cfg.dataset_split, dataset_config=cfg.dataset_config,
                                            limit=cfg.max_train_examples)
        self.template = load_template(cfg.template)
        self.chat = resolve_chat_mode(cfg.prompt_mode, self.tokenizer)
        self._render = lambda text: encode_prompt(self.tokenizer, render_prompt(self.template, text, tokenizer=self.tokenizer,
                                                                                 chat=self.chat), chat=self.chat)
        # Tokenise every prompt once; drop those over max_prompt_length up front so each draw is a
        # full batch on every rank (skipping at draw time would desynchronise ranks).
        rendered = [self._render(p.problem) for p in self.problems]
        keep = [i for i, ids in enumerate(rendered) if len(ids) <= cfg.max_prompt_length]
        self.skipped_long_prompts = len(rendered) - len(keep)
        if not keep:
            raise DsdrError(f"config key 'max_prompt_length': all {len(rendered)} training prompts are longer "
                            f"than {cfg.max_prompt_length} tokens")
        if self.skipped_long_prompts and self.dist.main:
            print(f"dsdr-train: skipping {self.skipped_long_prompts} of {len(rendered)} training problems longer than "
                  f"max_prompt_length={cfg.max_prompt_length} tokens", file=sys.stderr)
        self.problems = [self.problems[i] for i in keep]
        self.prompt_ids = [rendered[i] for i in keep]
        self.sampler = PromptSampler(len(self.problems), cfg.seed)
        self.step = 0
        if resume_from is not None:
            state = ckpt.load_trainer_state(resume_from)
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.sampler.load_state_dict(state["sampler"])
            rng = state["rng"]
            ckpt.set_rng_state(rng[self.dist.rank % len(rng)] if isinstance(rng, list) else rng)
            self.step = int(state["step"])

        if cfg.rollout_engine == "vllm":
            self.engine: Any = VLLMRollout(model_path if resume_from is None else str(resume_from), self.tokenizer,
                                           seed=seed, max_model_len=cfg.max_prompt_length + cfg.max_response_length,
                                           dtype=str(dtype).replace("torch.", ""),
                                           gpu_memory_utilization=cfg.vllm_gpu_memory_utilization)
        else:
            self.engine = HFRollout(self.tokenizer, batch_size=cfg.generation_batch_size,
                                    record_log_probs=cfg.check_on_policy)
        self.encoder = None
        if cfg.reward == "dsdr" or cfg.log_diversity or (cfg.reward == "darling" and cfg.darling_partition.startswith("embedding")):
            from dsdr_eval.diversity import load_encoder

            self.encoder = load_encoder(cfg.encoder, device="cpu" if self.device.type == "cpu" else str(self.device),
                                        chunked=cfg.encoder_chunked, max_seq_length=cfg.encoder_max_seq_length)
        self.equivalence = None
        if cfg.reward == "darling":
            from dsdr_eval.partition_methods import make_equivalence

            self.equivalence = make_equivalence(cfg.darling_partition, encoder=self.encoder,
                                                threshold=cfg.darling_threshold, device=str(self.device))
        self.val_problems = self._load_val() if cfg.val_data else None
        self.tb = None
        if self.dist.main and cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tensorboard"))
        if self.dist.main and config_record is not None:
            from dsdr_eval.diversity import EXTRACTION_RULES
            from dsdr_eval.rundir import save_config

            config_record = dict(config_record, template={"name": self.template.name, "text": self.template.text,
                                                          "chat": self.chat},
                                 encoder=self.encoder.settings() if self.encoder is not None else None,
                                 formula_extraction=EXTRACTION_RULES[cfg.formula_rules],
                                 objective_notes={**algos.COMMON_NOTES, **algos.ALGO_NOTES.get(cfg.algo, {})})
            save_config(run_dir, config_record)

    # -- rollout ----------------------------------------------------------------------------
    def _draw_prompts(self) -> tuple[list[list[int]], list[int], list[int]]:
        """Every rank draws the same global prompt list and takes its own slice of whole groups.

        The group id is the problem's global draw position (sampler cursor), unique over all steps,
        ranks and DAPO generation batches, so rollouts of different prompts never share an id."""
        start = self.sampler.cursor
        indices = self.sampler.next_indices(self.cfg.prompts_per_step)
        lo = self.dist.rank * self.local_prompts
        offsets = range(lo, lo + self.local_prompts)
        return ([self.prompt_ids[indices[o]] for o in offsets], [start + o for o in offsets],
                [indices[o] for o in offsets])

    def _generate(self, prompt_ids: list[list[int]], group_ids: list[int], problem_idx: list[int], *, n: int,
                  temperature: float, top_p: float, max_tokens: int) -> RolloutBatch:
        return self.engine.generate(self.policy, prompt_ids, n=n, temperature=temperature, top_p=top_p,
                                    max_new_tokens=max_tokens, group_ids=group_ids, problem_idx=problem_idx)

    def collect(self, m: dict[str, float]) -> tuple[RolloutBatch, list[dict], np.ndarray]:
        """Rollouts + grading, with DAPO dynamic sampling (§2): keep only groups whose verifier
        accuracy varies, sample more batches until the quota is full or max_num_gen_batches."""
        cfg = self.cfg
        kept, kept_graded, n_gen = RolloutBatch(), [], 0
        all_acc: list[float] = []
        all_gids: list[int] = []
        t_gen = t_rew = 0.0
        limit = cfg.max_num_gen_batches if cfg.dynamic_sampling else 1
        last: tuple[RolloutBatch, list[dict]] | None = None
        while True:
            n_gen += 1
            t0 = time.perf_counter()
            prompts, gids, pis = self._draw_prompts()
            batch = self._generate(prompts, gids, pis, n=cfg.group_size, temperature=cfg.temperature, top_p=cfg.top_p,
                                   max_tokens=cfg.max_response_length)
            t1 = time.perf_counter()
            graded = grade(batch, self.problems, cfg) if len(batch) else []
            t_gen, t_rew = t_gen + t1 - t0, t_rew + time.perf_counter() - t1
            acc = np.array([float(r["correct"]) for r in graded])
            all_acc.extend(acc.tolist()), all_gids.extend(batch.group_ids)
            last = (batch, graded)
            if cfg.dynamic_sampling and len(batch):
                keep = algos.dapo_keep_groups(torch.tensor(acc), torch.tensor(batch.group_ids))
                rows = [i for i, k in enumerate(keep.tolist()) if k]
            else:
                rows = list(range(len(batch)))
            kept.extend(batch.select(rows)), kept_graded.extend(graded[i] for i in rows)
            have = len(set(kept.group_ids))
            # All ranks take the same decision, so every rank runs the same number of generate calls.
            need_more = all_reduce_scalar(float(have < self.local_prompts), self.dist, "max") > 0
            if not need_more or n_gen >= limit:
                break
        if cfg.dynamic_sampling and need_more and cfg.dapo_exhausted == "error":
            kept_total = int(all_reduce_scalar(float(have), self.dist, "sum"))
            raise DapoExhausted(f"config key 'max_num_gen_batches': DAPO dynamic sampling kept {kept_total} of "
                                f"{cfg.prompts_per_step} prompts with varying accuracy after {n_gen} generation batches "
                                f"at step {self.step + 1} (dapo_exhausted=error; dapo_exhausted=train updates on what was kept)")
        if cfg.dynamic_sampling:
            # Trim to whole groups, the same number on every rank (DDP needs equal update counts).
            target = int(all_reduce_scalar(float(min(len(set(kept.group_ids)), self.local_prompts)), self.dist, "min"))
            if target == 0 and last is not None:
                # Nothing with signal after max_num_gen_batches: train on the last batch as is (its
                # accuracy advantages are all zero) rather than skip the optimizer step.
                kept, kept_graded = last
                target = len(set(kept.group_ids))
            order = list(dict.fromkeys(kept.group_ids))[:target]
            keep_set = set(order)
            rows = [i for i, g in enumerate(kept.group_ids) if g in keep_set]
            kept, kept_graded = kept.select(rows), [kept_graded[i] for i in rows]
        # Group statistics over everything generated this step (before any filtering).
        acc_by_group: dict[int, list[float]] = {}
        for g, a in zip(all_gids, all_acc):
            acc_by_group.setdefault(g, []).append(a)
        group_means = gather_lists([float(np.mean(v)) for v in acc_by_group.values()], self.dist)
        m["groups/all_correct_frac"] = float(np.mean([x == 1.0 for x in group_means])) if group_means else 0.0
        m["groups/all_wrong_frac"] = float(np.mean([x == 0.0 for x in group_means])) if group_means else 0.0
        m["dapo/num_gen_batches"] = n_gen
        m["time/generate_s"], m["time/reward_s"] = t_gen, t_rew
        return kept, kept_graded, np.array([float(r["correct"]) for r in kept_graded])

    # -- rewards and advantages ------------------------------------------------------------
    def shape(self, batch: RolloutBatch, graded: list[dict], acc: np.ndarray, m: dict[str, float]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        t0 = time.perf_counter()
        # float64: in an all-correct DSDR group rewards differ by ~1e-4 (see core_algos docstring).
        acc_t = torch.tensor(acc, dtype=torch.float64)
        gids = torch.tensor(batch.group_ids)
        lengths = torch.tensor([len(r) for r in batch.response_ids], dtype=torch.float32)
        reward = acc_t.clone()
        if cfg.overlong_shaping:  # DAPO overlong reward shaping (§2), added to the verifier reward
            reward = reward + algos.dapo_overlong_penalty(lengths, max_response_length=cfg.max_response_length,
                                                          buffer=cfg.overlong_buffer, factor=cfg.overlong_factor).double()
        d = torch.zeros_like(reward)
        if self.encoder is not None and (cfg.reward == "dsdr" or cfg.log_diversity):
            d_emb, d_eq, d_np = group_diversity(batch, self.encoder, cfg.formula_rules)
            d = torch.tensor(d_np, dtype=torch.float64)
            m["diversity/semantic"], m["diversity/formula"] = self._mean(d_emb.tolist()), self._mean(d_eq.tolist())
            m["similarity/semantic"], m["similarity/formula"] = 1 - m["diversity/semantic"], 1 - m["diversity/formula"]
        weights = torch.zeros_like(reward)
        if cfg.reward == "dsdr":  # §3.2 correct-only bounded bonus (lambda_d = 0 for w/o GD)
            shaped = algos.dsdr_shaped_rewards(acc_t, d, lambda_d=cfg.lambda_d, sigma_d=cfg.sigma_d) + (reward - acc_t)
        elif cfg.reward == "darling":  # §4: r * Div
            div = torch.tensor(darling_diversity(batch, graded, self.equivalence, cfg), dtype=torch.float64)
            shaped = algos.darling_rewards(acc_t, div, floor=cfg.darling_floor) + (reward - acc_t)
        else:
            shaped = reward
        if cfg.local_term:  # §3.3 global-to-local coupling weights (uniform for w/o GD)
            weights = algos.dsdr_coupling_weights(acc_t, d, gids, tau=cfg.tau, sigma_d=cfg.sigma_d,
                                                  uniform=bool(cfg.uniform_coupling))
        adv = algos.compute_group_advantage(shaped, gids, std_mode=cfg.std_mode, eps=cfg.eps,
                                            singleton=cfg.singleton_advantage).float()
        for key, values in (("reward", reward), ("shaped_reward", shaped)):
            m[f"{key}/mean"], m[f"{key}/std"] = self._mean(values.tolist()), self._std(values.tolist())
        m["acc/mean"] = self._mean(acc.tolist())
        m.setdefault("diversity/semantic", None)
        m["bonus/mean"] = m["shaped_reward/mean"] - m["reward/mean"]
        all_adv = gather_lists(adv.tolist(), self.dist)
        m.update({"adv/mean": float(np.mean(all_adv)), "adv/std": float(np.std(all_adv)),
                  "adv/min": float(np.min(all_adv)), "adv/max": float(np.max(all_adv))})
        all_len = gather_lists(lengths.tolist(), self.dist)
        m["response_length/mean"], m["response_length/max"] = float(np.mean(all_len)), float(np.max(all_len))
        m["response_length/clip_ratio"] = self._mean([float(r == "length") for r in batch.finish_reasons])
        m["time/reward_s"] += time.perf_counter() - t0
        return {"advantages": adv, "weights": weights}

    def _mean(self, values: list[float]) -> float:
        values = gather_lists(values, self.dist)
        return float(np.mean(values)) if values else 0.0

    def _std(self, values: list[float]) -> float:
        values = gather_lists(values, self.dist)
        return float(np.std(values)) if values else 0.0

    # -- PPO update --------------------------------------------------------------------------
    def _micro_batches(self, rows: list[int]) -> list[list[int]]:
        size = self.cfg.micro_batch_size
        return [rows[i:i + size] for i in range(0, len(rows), size)]

    @torch.no_grad()
    def _log_probs_of(self, model: torch.nn.Module, batch: RolloutBatch, rows: list[int]) -> dict[int, torch.Tensor]:
        """Detached log-probs (old policy, reference) in eval mode: the rollouts were sampled in
        eval mode, so dropout here would make log pi_old a noisy sample of another distribution."""
        out: dict[int, torch.Tensor] = {}
        with eval_mode(model):
            for micro in self._micro_batches(rows):
                t = pad_rollouts(batch, micro, self.pad_id, self.device)
                lp = token_log_probs(response_logits(model, t), t["input_ids"][:, int(t["prompt_width"]):],
                                     self.cfg.temperature)
                for r, i in enumerate(micro):
                    out[i] = lp[r, :len(batch.response_ids[i])].cpu()
        return out

    @staticmethod
    def _stack(values: dict[int, torch.Tensor], micro: list[int], width: int, device: torch.device) -> torch.Tensor:
        out = torch.zeros(len(micro), width)
        for r, i in enumerate(micro):
            out[r, :len(values[i])] = values[i]
        return out.to(device)

    def update(self, batch: RolloutBatch, shaped: dict[str, torch.Tensor], m: dict[str, float]) -> None:
        cfg = self.cfg
        t0 = time.perf_counter()
        groups = list(groups_of(batch.group_ids).values())
        mini_groups = max(1, cfg.mini_batch_prompts // self.dist.world)
        n_updates = cfg.ppo_epochs * math.ceil(len(groups) / mini_groups)
        everything = list(range(len(batch)))
        # On-policy shortcut: with a single update the old policy is the current one, so the
        # detached current log-probs are exactly log pi_old (ratio 1), saving a forward pass.
        old = self._log_probs_of(self.model, batch, everything) if n_updates > 1 else None
        if batch.sampler_log_probs:  # the first mini-batch's importance ratio, against what was sampled
            m["rollout/ratio_dev_max"] = all_reduce_scalar(sampler_ratio_deviation(
                old if old is not None else self._log_probs_of(self.model, batch, everything), batch), self.dist, "max")
        ref = self._log_probs_of(self.ref, batch, everything) if self.ref is not None else None
        sums: dict[str, float] = {}
        weight_total = 0.0
        gen = torch.Generator().manual_seed(cfg.seed * 100003 + self.step)
        for _ in range(cfg.ppo_epochs):
            perm = torch.randperm(len(groups), generator=gen).tolist()  # shuffle whole groups
            for start in range(0, len(groups), mini_groups):
                rows = [i for gi in perm[start:start + mini_groups] for i in groups[gi]]
                self._update_mini_batch(batch, rows, shaped, old, ref, sums)
                weight_total += 1
        # Each rank's sums are its shares of the whole mini-batches' values: sum over ranks.
        for key, value in sums.items():
            m[key] = all_reduce_scalar(value / max(weight_total, 1), self.dist, "sum")
        m["loss/total"] = m["loss/pg"] + m["loss/local"] + m["loss/kl"]
        m["lr"] = self.scheduler.get_last_lr()[0]
        m["time/update_s"] = time.perf_counter() - t0

    def _mini_batch_divisors(self, batch: RolloutBatch, rows: list[int], weights: torch.Tensor
                             ) -> tuple[dict[str, float], float, float]:
        """Divisors of the whole mini-batch (all its micro-batches on all ranks, one all-reduce):
        the ``agg_loss`` keyword of the run's loss_agg_mode, the J_local divisor of ``local_norm``
        and the token count. With them every micro-batch loss is its exact share of the one-pass
        loss over the concatenated mini-batch (core_algos.agg_loss)."""
        cfg = self.cfg
        lengths = [len(batch.response_ids[i]) for i in rows]
        members = groups_of([batch.group_ids[i] for i in rows])
        with_correct = sum(float(weights[[rows[j] for j in js]].sum()) > 0 for js in members.values())
        tokens, sequences, prompts, correct_prompts = all_reduce_values(
            [float(sum(lengths)), float(sum(n > 0 for n in lengths)), float(len(members)), float(with_correct)], self.dist)
        divisors = algos.agg_divisors(cfg.loss_agg_mode, num_tokens=tokens, num_sequences=sequences,
                                      norm_constant=cfg.loss_norm_constant)
        local_divisor = {"prompts": prompts, "correct_prompts": max(correct_prompts, 1.0), "none": 1.0}[cfg.local_norm]
        return divisors, local_divisor, max(tokens, 1.0)

    def _update_mini_batch(self, batch: RolloutBatch, rows: list[int], shaped: dict[str, torch.Tensor],
                           old: dict[int, torch.Tensor] | None, ref: dict[int, torch.Tensor] | None,
                           sums: dict[str, float]) -> None:
        cfg = self.cfg
        divisors, local_divisor, total_tokens = self._mini_batch_divisors(batch, rows, shaped["weights"])
        micros = self._micro_batches(rows)
        acc: dict[str, float] = {}
        self.optimizer.zero_grad(set_to_none=True)
        for k, micro in enumerate(micros):
            t = pad_rollouts(batch, micro, self.pad_id, self.device)
            mask = t["response_mask"]
            P = int(t["prompt_width"])
            sync = nullcontext() if (k == len(micros) - 1 or self.dist.world == 1) else self.model.no_sync()
            with sync:
                logits = response_logits(self.model, t)
                log_probs = token_log_probs(logits, t["input_ids"][:, P:], cfg.temperature)
                old_lp = self._stack(old, micro, mask.shape[1], self.device) if old is not None else log_probs.detach()
                adv = shaped["advantages"][micro].to(self.device)
                # Every term is this micro-batch's share of the mini-batch value (global divisors).
                pg_loss, stats = algos.compute_policy_loss(
                    log_probs, old_lp, adv, mask, clip_ratio_low=cfg.clip_ratio_low,
                    clip_ratio_high=cfg.clip_ratio_high, loss_agg_mode=cfg.loss_agg_mode, clamp=cfg.log_ratio_clamp,
                    **divisors)
                loss = pg_loss
                local = torch.zeros((), device=self.device)
                if cfg.local_term and cfg.lambda_l:
                    # §3.4-3.5: maximise lambda_l * J_local; the w_i sum to 1 per group, and the
                    # mini-batch sum is divided per local_norm (default: its number of prompts,
                    # a mean over prompts like J_GRPO).
                    j_local = algos.dsdr_local_entropy_term(log_probs, old_lp, mask, shaped["weights"][micro].to(self.device),
                                                            clamp=cfg.log_ratio_clamp, num_groups=local_divisor)
                    local = -cfg.lambda_l * j_local
                    loss = loss + local
                kl = torch.zeros((), device=self.device)
                if ref is not None:
                    k3 = algos.kl_penalty_k3(log_probs, self._stack(ref, micro, mask.shape[1], self.device))
                    kl = cfg.kl_coef * algos.agg_loss(k3, mask, cfg.loss_agg_mode, **divisors)
                    loss = loss + kl
                # DDP averages gradients over ranks; the shares above add up over ranks, so undo the mean.
                (loss * self.dist.world).backward()
            with torch.no_grad():
                entropy = algos.agg_loss(algos.token_entropy_from_logits(logits.detach(), cfg.temperature), mask,
                                         cfg.loss_agg_mode, **divisors)
            token_share = float(mask.sum().item()) / total_tokens  # the stats are token means of this micro-batch
            for key, value in (("loss/pg", pg_loss), ("loss/local", local), ("loss/kl", kl), ("entropy/mean", entropy)):
                acc[key] = acc.get(key, 0.0) + float(value.detach())
            for key in ("clip/frac", "clip/frac_low", "clip/frac_high", "kl/approx"):
                acc[key] = acc.get(key, 0.0) + stats.get(key, 0.0) * token_share
            del logits
        if cfg.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        for key, value in acc.items():
            sums[key] = sums.get(key, 0.0) + value

    # -- validation ------------------------------------------------------------------------
    def _load_val(self) -> list[TrainProblem]:
        spec = self.cfg.val_data
        assert spec is not None
        if Path(spec).suffix == ".jsonl" or Path(spec).exists():
            return load_train_problems(spec, limit=self.cfg.val_max_problems)
        from dsdr_eval.tasks import load_benchmark

        return [TrainProblem(p.id, p.problem, p.answer) for p in load_benchmark(spec, limit=self.cfg.val_max_problems)]

    def validate(self) -> dict[str, float]:
        """val/pass@1: one rollout at T=0.1 (§5); val/avg@n: n rollouts at val_temperature;
        val/acc: mean correctness over all validation rollouts. Rank 0 only."""
        cfg = self.cfg
        assert self.val_problems is not None
        probs = self.val_problems
        prompts = [self._render(p.problem) for p in probs]
        gids, pis = list(range(len(probs))), list(range(len(probs)))
        from dsdr_eval.grading import grade_samples

        out: dict[str, float] = {}
        every: list[float] = []
        for name, n, temp in (("pass@1", 1, cfg.val_pass1_temperature), (f"avg@{cfg.val_n}", cfg.val_n, cfg.val_temperature)):
            batch = self._generate(prompts, gids, pis, n=n, temperature=temp, top_p=cfg.val_top_p,
                                   max_tokens=cfg.resolved_val_max_tokens)
            rows = [{"problem_id": str(g), "gold": probs[pi].answer, "completion": t}
                    for g, pi, t in zip(batch.group_ids, batch.problem_idx, batch.texts)]
            correct = [float(r["correct"]) for r in grade_samples(rows, progress=False, pool=grading_pool(cfg))]
            out[f"val/{name}"] = float(np.mean(correct))
            every.extend(correct)
        out["val/acc"] = float(np.mean(every))
        return out

    # -- checkpoints & logging ---------------------------------------------------------------
    def save(self) -> None:
        extra: dict[str, Any] = {"sampler": self.sampler.state_dict()}
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
        append_jsonl(self.run_dir / "metrics.jsonl", [m])
        if self.tb is not None:
            for key, value in m.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.tb.add_scalar(key, value, m["step"])

    # -- the loop ----------------------------------------------------------------------------
    def train(self) -> Path:
        from tqdm.auto import tqdm

        cfg = self.cfg
        bar = tqdm(total=cfg.total_steps, initial=self.step, desc=f"dsdr-train {cfg.algo}", unit="step",
                   disable=not (cfg.progress and self.dist.main), file=sys.stderr)
        self.model.train()
        started = time.perf_counter()
        while self.step < cfg.total_steps:
            if cfg.time_limit_s is not None and time.perf_counter() - started > cfg.time_limit_s:
                bar.write(f"time_limit_s={cfg.time_limit_s} reached after step {self.step}; stopping")
                break
            t0 = time.perf_counter()
            m: dict[str, Any] = {"step": self.step + 1}
            try:
                batch, graded, acc = self.collect(m)
            except DapoExhausted:
                if self.step and not (cfg.save_every and self.step % cfg.save_every == 0):
                    self.save()  # keep the steps already trained before stopping
                raise
            shaped = self.shape(batch, graded, acc, m)
            self.update(batch, shaped, m)
            self.step += 1
            if cfg.val_data and ((cfg.val_every and self.step % cfg.val_every == 0) or self.step == cfg.total_steps):
                if self.dist.main:
                    m.update(self.validate())
            m["time/total_s"] = time.perf_counter() - t0
            for key in ("diversity/semantic", "diversity/formula", "similarity/semantic", "similarity/formula"):
                m.setdefault(key, None)  # not computed (log_diversity=false and no diversity objective)
            self.log({k: m[k] for k in sorted(m, key=_key_order)})
            if cfg.save_every and self.step % cfg.save_every == 0:
                self.save()
            bar.update(1)
            bar.set_postfix(acc=f"{m['acc/mean']:.2f}", loss=f"{m['loss/total']:.3g}", ent=f"{m['entropy/mean']:.2f}")
        bar.close()
        close_grading_pools()
        final = self.run_dir / ckpt.FINAL
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


_ORDER = ["step", "time/total_s", "time/generate_s", "time/reward_s", "time/update_s"]


def _key_order(key: str) -> tuple[int, str]:
    return (_ORDER.index(key), key) if key in _ORDER else (len(_ORDER), key)


def prepare_metrics_for_resume(run_dir: Path, step: int) -> int:
    """Drop metrics lines past the checkpoint step (they will be recomputed) and a torn last line.

    Returns how many lines were dropped."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return 0
    repair_truncated_tail(path)
    rows = read_jsonl(path)
    keep = [r for r in rows if int(r.get("step", 0)) <= step]
    if len(keep) != len(rows):
        write_jsonl(path, keep)
    return len(rows) - len(keep)
