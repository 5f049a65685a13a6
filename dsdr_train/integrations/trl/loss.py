"""The loss of one TRL micro-batch: docs/ALGORITHMS.md §3.5, Eq. 14 (with §1's optional KL, Eq. 5),
assembled from core_algos exactly as the compact trainer's ``update._update_mini_batch`` does:

    loss = policy_loss (Eq. 2-4) - lambda_l * J_local (Eq. 13) + kl_coef * agg_loss(k3 (Eq. 5))

every term divided by its WHOLE mini-batch's divisors (``batch.mini_batch_chunks``), so it is the
micro-batch's exact share of the one-pass loss over the mini-batch on all processes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dsdr_train import core_algos as algos
from dsdr_train.objective import ObjectiveConfig

STAT_KEYS = ("clip/frac", "clip/frac_low", "clip/frac_high", "kl/approx")


@dataclass(frozen=True)
class LossTerms:
    """The micro-batch's terms (scalars, ``total`` with grad) and its token statistics."""

    total: Tensor
    pg: float
    local: float
    kl: float
    entropy: float
    stats: dict[str, float]


def micro_batch_loss(objective: ObjectiveConfig, log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor,
                     mask: Tensor, weights: Tensor, divisors: dict, *, entropies: Tensor | None = None,
                     ref_log_probs: Tensor | None = None) -> LossTerms:
    """``[b, T]`` log-probs / old log-probs / mask (0 on padding and on rows that do not train),
    ``[b]`` advantages and coupling weights; ``divisors``: ``{"agg", "local", "tokens"}`` of the
    whole mini-batch."""
    agg = divisors["agg"]
    pg, stats = algos.policy_loss(objective, log_probs, old_log_probs, advantages, mask, **agg)
    local = torch.zeros((), device=log_probs.device, dtype=log_probs.dtype)
    if objective.local_term and objective.lambda_l:  # Eq. 14: maximise lambda_l * J_local (Eq. 13)
        j_local = algos.dsdr_local_entropy_term(log_probs, old_log_probs, mask, weights,
                                                clamp=objective.log_ratio_clamp, num_groups=divisors["local"])
        local = -objective.lambda_l * j_local
    kl = torch.zeros((), device=log_probs.device, dtype=log_probs.dtype)
    if ref_log_probs is not None and objective.use_kl:  # §1, Eq. 5
        kl = objective.kl_coef * algos.agg_loss(algos.kl_penalty_k3(log_probs, ref_log_probs), mask,
                                                objective.loss_agg_mode, **agg)
    entropy = 0.0
    if entropies is not None:
        entropy = float(algos.agg_loss(entropies.detach().float(), mask, objective.loss_agg_mode, **agg))
    share = float(mask.sum()) / divisors["tokens"]  # token statistics: token means of this micro-batch
    return LossTerms(total=pg + local + kl, pg=float(pg.detach()), local=float(local.detach()), kl=float(kl.detach()),
                     entropy=entropy, stats={k: stats.get(k, 0.0) * share for k in STAT_KEYS})
