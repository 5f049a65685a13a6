"""The PPO update of one rollout batch: shuffled whole-group mini-batches, gradient accumulation
over micro-batches with whole-mini-batch divisors, one optimizer step per mini-batch.

The loss of a mini-batch is docs/ALGORITHMS.md §3.5, Eq. 14 (with §1's optional KL, Eq. 5):
``policy_loss (Eq. 2-4) - lambda_l * J_local (Eq. 13) + kl_coef * agg_loss(k3)``; every term of a
micro-batch is its exact share of the one-pass value over the concatenated mini-batch (all its
micro-batches on all ranks), so accumulation and data parallelism change nothing.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from dsdr_train import core_algos as algos
from dsdr_train.config import TrainConfig
from dsdr_train.distributed import Dist, all_reduce_values
from dsdr_train.modeling import eval_mode, rollout_logits, token_log_probs
from dsdr_train.rollout import RolloutBatch, sampler_ratio_deviation
from dsdr_train.scoring import groups_of
from dsdr_train.stats import UpdateStats

_STAT_KEYS = ("clip/frac", "clip/frac_low", "clip/frac_high", "kl/approx")


@dataclass(frozen=True)
class UpdateContext:
    """What an update touches: the (DDP-wrapped) model, its bare policy, the optional reference,
    the optimizer and schedule, and where the tensors live."""

    cfg: TrainConfig
    model: torch.nn.Module
    policy: torch.nn.Module
    ref: torch.nn.Module | None
    optimizer: torch.optim.Optimizer
    scheduler: Any
    dist: Dist
    device: torch.device
    pad_id: int


def micro_batches(rows: list[int], size: int) -> list[list[int]]:
    return [rows[i:i + size] for i in range(0, len(rows), size)]


@torch.no_grad()
def log_probs_of(ctx: UpdateContext, model: torch.nn.Module, batch: RolloutBatch, rows: list[int]
                 ) -> dict[int, torch.Tensor]:
    """Detached log-probs (old policy, reference) in eval mode: the rollouts were sampled in
    eval mode, so dropout here would make log pi_old a noisy sample of another distribution.
    No gradient flows here, so the bare policy runs even under DDP (each prompt prefilled once)."""
    out: dict[int, torch.Tensor] = {}
    bare = ctx.policy if model is ctx.model else model
    with eval_mode(bare):
        for micro in micro_batches(rows, ctx.cfg.micro_batch_size):
            logits, labels, _ = rollout_logits(bare, batch, micro, ctx.pad_id, ctx.device, share_prompts=True)
            lp = token_log_probs(logits, labels, ctx.cfg.temperature)
            for r, i in enumerate(micro):
                out[i] = lp[r, :len(batch.response_ids[i])].cpu()
    return out


def _stack(values: dict[int, torch.Tensor], micro: list[int], width: int, device: torch.device) -> torch.Tensor:
    out = torch.zeros(len(micro), width)
    for r, i in enumerate(micro):
        out[r, :len(values[i])] = values[i]
    return out.to(device)


def ppo_update(ctx: UpdateContext, batch: RolloutBatch, shaped: algos.ShapedRewards, step: int) -> UpdateStats:
    """``ppo_epochs`` passes over ``batch`` in mini-batches of whole groups; this rank's stats."""
    cfg = ctx.cfg
    t0 = time.perf_counter()
    groups = list(groups_of(batch.group_ids).values())
    mini_groups = max(1, cfg.mini_batch_prompts // ctx.dist.world)
    n_updates = cfg.ppo_epochs * math.ceil(len(groups) / mini_groups)
    everything = list(range(len(batch)))
    # On-policy shortcut: with a single update the old policy is the current one, so the
    # detached current log-probs are exactly log pi_old (ratio 1), saving a forward pass.
    old = log_probs_of(ctx, ctx.model, batch, everything) if n_updates > 1 else None
    ratio_dev = None
    if batch.sampler_log_probs:  # the first mini-batch's importance ratio, against what was sampled
        ratio_dev = sampler_ratio_deviation(old if old is not None else log_probs_of(ctx, ctx.model, batch, everything),
                                            batch)
    ref = log_probs_of(ctx, ctx.ref, batch, everything) if ctx.ref is not None else None
    sums: dict[str, float] = {}
    gen = shuffle_generator(cfg.seed, step)
    for _ in range(cfg.ppo_epochs):
        perm = torch.randperm(len(groups), generator=gen).tolist()  # shuffle whole groups
        for start in range(0, len(groups), mini_groups):
            rows = [i for gi in perm[start:start + mini_groups] for i in groups[gi]]
            for key, value in _update_mini_batch(ctx, batch, rows, shaped, old, ref).items():
                sums[key] = sums.get(key, 0.0) + value / n_updates
    return UpdateStats(loss_pg=sums["loss/pg"], loss_local=sums["loss/local"], loss_kl=sums["loss/kl"],
                       entropy=sums["entropy/mean"], clip_frac=sums["clip/frac"], clip_frac_low=sums["clip/frac_low"],
                       clip_frac_high=sums["clip/frac_high"], kl_approx=sums["kl/approx"], ratio_dev_max=ratio_dev,
                       lr=ctx.scheduler.get_last_lr()[0], update_s=time.perf_counter() - t0)


def _mini_batch_divisors(ctx: UpdateContext, batch: RolloutBatch, rows: list[int], weights: torch.Tensor
                         ) -> tuple[dict[str, float], float, float]:
    """Divisors of the whole mini-batch (all its micro-batches on all ranks, one all-reduce):
    the ``agg_loss`` keyword of the run's loss_agg_mode, the J_local divisor of ``local_norm``
    and the token count."""
    objective = ctx.cfg.objective
    lengths = [len(batch.response_ids[i]) for i in rows]
    members = groups_of([batch.group_ids[i] for i in rows])
    with_correct = sum(float(weights[[rows[j] for j in js]].sum()) > 0 for js in members.values())
    tokens, sequences, prompts, correct_prompts = all_reduce_values(
        [float(sum(lengths)), float(sum(n > 0 for n in lengths)), float(len(members)), float(with_correct)], ctx.dist)
    return mini_batch_divisors(objective, tokens=tokens, sequences=sequences, prompts=prompts,
                               correct_prompts=correct_prompts, norm_constant=ctx.cfg.loss_norm_constant)


def shuffle_generator(seed: int, step: int) -> torch.Generator:
    """The generator that orders step ``step``'s groups into mini-batches (every engine shuffles
    with this one, so the compact and TRL engines see the same mini-batches)."""
    return torch.Generator().manual_seed(seed * 100003 + step)


def mini_batch_divisors(objective: Any, *, tokens: float, sequences: float, prompts: float, correct_prompts: float,
                        norm_constant: float | None) -> tuple[dict[str, float], float, float]:
    """From a whole mini-batch's counts (all micro-batches, all processes): the ``agg_loss`` keyword
    of ``loss_agg_mode``, the J_local divisor of ``local_norm`` (at least 1) and the token count
    (at least 1)."""
    divisors = algos.agg_divisors(objective.loss_agg_mode, num_tokens=tokens, num_sequences=sequences,
                                  norm_constant=norm_constant)
    local_divisor = {"prompts": max(prompts, 1.0), "correct_prompts": max(correct_prompts, 1.0),
                     "none": 1.0}[objective.local_norm]
    return divisors, local_divisor, max(tokens, 1.0)


def _update_mini_batch(ctx: UpdateContext, batch: RolloutBatch, rows: list[int], shaped: algos.ShapedRewards,
                       old: dict[int, torch.Tensor] | None, ref: dict[int, torch.Tensor] | None) -> dict[str, float]:
    """One optimizer step on the mini-batch ``rows``; its loss terms and token statistics."""
    cfg, objective = ctx.cfg, ctx.cfg.objective
    divisors, local_divisor, total_tokens = _mini_batch_divisors(ctx, batch, rows, shaped.weights)
    micros = micro_batches(rows, cfg.micro_batch_size)
    acc: dict[str, float] = dict.fromkeys(("loss/pg", "loss/local", "loss/kl", "entropy/mean", *_STAT_KEYS), 0.0)
    ctx.optimizer.zero_grad(set_to_none=True)
    for k, micro in enumerate(micros):
        sync = nullcontext() if (k == len(micros) - 1 or ctx.dist.world == 1) else ctx.model.no_sync()
        with sync:
            # One prompt forward per group (modeling.shared_prompt_logits) where it applies.
            logits, labels, mask = rollout_logits(ctx.model, batch, micro, ctx.pad_id, ctx.device, share_prompts=True)
            log_probs = token_log_probs(logits, labels, cfg.temperature)
            old_lp = _stack(old, micro, mask.shape[1], ctx.device) if old is not None else log_probs.detach()
            pg_loss, stats = algos.policy_loss(objective, log_probs, old_lp, shaped.advantages[micro].to(ctx.device),
                                               mask, **divisors)
            local = torch.zeros((), device=ctx.device)
            if objective.local_term and objective.lambda_l:  # Eq. 14: maximise lambda_l * J_local (Eq. 13)
                j_local = algos.dsdr_local_entropy_term(log_probs, old_lp, mask, shaped.weights[micro].to(ctx.device),
                                                        clamp=objective.log_ratio_clamp, num_groups=local_divisor)
                local = -objective.lambda_l * j_local
            kl = torch.zeros((), device=ctx.device)
            if ref is not None:  # §1, Eq. 5
                k3 = algos.kl_penalty_k3(log_probs, _stack(ref, micro, mask.shape[1], ctx.device))
                kl = objective.kl_coef * algos.agg_loss(k3, mask, objective.loss_agg_mode, **divisors)
            # DDP averages gradients over ranks; the shares above add up over ranks, so undo the mean.
            ((pg_loss + local + kl) * ctx.dist.world).backward()
        with torch.no_grad():
            entropy = algos.agg_loss(algos.token_entropy_from_logits(logits.detach(), cfg.temperature), mask,
                                     objective.loss_agg_mode, **divisors)
        token_share = float(mask.sum().item()) / total_tokens  # the stats are token means of this micro-batch
        for key, value in (("loss/pg", pg_loss), ("loss/local", local), ("loss/kl", kl), ("entropy/mean", entropy)):
            acc[key] += float(value.detach())
        for key in _STAT_KEYS:
            acc[key] += stats.get(key, 0.0) * token_share
        del logits
    if cfg.max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(ctx.policy.parameters(), cfg.max_grad_norm)
    ctx.optimizer.step()
    ctx.scheduler.step()
    return acc
