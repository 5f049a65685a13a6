"""The group-level part of DSDR / DARLING on a verl batch: verifier accuracy -> diversity within each
uid group -> shaped reward and coupling weights (docs/ALGORITHMS.md §3.1-§3.3, §4).

verl-free: the trainer (:mod:`.trainer`) hands in the decoded responses, their ``uid`` and verl's
reward scores. Every number comes from the compact trainer's own functions
(:func:`dsdr_train.scoring.group_diversity`, :func:`dsdr_train.scoring.darling_diversity`) and
:func:`dsdr_train.core_algos.shape_rewards`; nothing is re-derived here.

Shapes: ``B`` = rollouts of the batch (all uid groups, any order).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dsdr_eval.grading import extract_rows
from dsdr_train import scoring
from dsdr_train.core_algos import RolloutSignals, ShapedRewards, group_ids_from_prompt_index, shape_rewards
from dsdr_train.integrations.verl.settings import PluginSettings
from dsdr_train.rollout import RolloutBatch


def verifier_accuracy(scores: Tensor, acc: Sequence[Any] | None = None) -> Tensor:
    """DSDR's 0/1 verifier outcome per rollout (float64 ``[B]``) from verl's reward.

    verl's ``math_dapo`` score is +1 / -1 (and may carry DAPO's overlong penalty) with the verdict in
    ``reward_extra_info["acc"]``; its other math scorers give 1 / 0. ``acc`` (one entry per rollout,
    None where the reward function gave none) wins where present; elsewhere a rollout is correct iff
    its score is > 0, which is right for both conventions."""
    scores = torch.as_tensor(scores, dtype=torch.float64)
    if scores.dim() != 1:
        raise ValueError(f"scores must have shape [B], got {tuple(scores.shape)}")
    correct = scores > 0
    if acc is not None:
        if len(acc) != scores.shape[0]:
            raise ValueError(f"{len(acc)} acc entries for {scores.shape[0]} rollouts")
        given = torch.tensor([a is not None for a in acc], dtype=torch.bool)
        verdict = torch.tensor([bool(a) if a is not None else False for a in acc], dtype=torch.bool)
        correct = torch.where(given, verdict, correct)
    return correct.to(torch.float64)


@dataclass(frozen=True)
class GroupRewards:
    """``shaped``: what the plugin's estimators normalise (:func:`shape_rewards`); ``diversity``
    (DSDR's d, Eq. 9) with its parts ``d_emb`` (Eq. 7) and ``d_eq`` (Eq. 8) / ``darling_div``
    (Eq. 15): per rollout, None when the objective reads none."""

    shaped: ShapedRewards
    group_ids: Tensor
    accuracy: Tensor
    diversity: np.ndarray | None
    darling_div: np.ndarray | None
    d_emb: np.ndarray | None = None
    d_eq: np.ndarray | None = None


def group_rewards(texts: Sequence[str], uids: Sequence[Hashable], accuracy: Tensor, response_lengths: Tensor,
                  max_response_length: int, settings: PluginSettings, *, encoder: Any = None,
                  equivalence: Any = None) -> GroupRewards:
    """The objective's rewards and coupling weights of one verl batch, each group = one uid.

    ``encoder``: a :func:`dsdr_eval.diversity_metrics.load_encoder` encoder (DSDR's D_emb; DARLING's
    embedding partition); ``equivalence``: DARLING's partition (``dsdr_eval.diversity_metrics.partition_methods``)."""
    group_ids = group_ids_from_prompt_index(list(uids))
    batch = RolloutBatch(texts=list(texts), group_ids=group_ids.tolist())
    objective = settings.objective
    diversity = darling_div = d_emb = d_eq = None
    # verl's reward gives the verdicts; dsdr's extraction says where each solution ends (the diversity
    # terms read no further) -- and no answer classes (see settings.PLUGIN_PARTITIONS)
    graded = extract_rows({"completion": text} for text in texts) if objective.reward in ("dsdr", "darling") else []
    if objective.reward == "dsdr":
        d_emb, d_eq, diversity = scoring.group_diversity(batch, graded, encoder, settings.formula_rules,
                                                         settings.solution_cut)
    if objective.reward == "darling":
        darling_div = scoring.darling_diversity(batch, graded, equivalence, settings)
    signals = RolloutSignals(
        accuracy=accuracy.to(torch.float64), group_ids=group_ids,
        response_lengths=torch.as_tensor(response_lengths), max_response_length=int(max_response_length),
        diversity=None if diversity is None else torch.tensor(diversity, dtype=torch.float64),
        darling_div=None if darling_div is None else torch.tensor(darling_div, dtype=torch.float64))
    return GroupRewards(shaped=shape_rewards(signals, objective), group_ids=group_ids, accuracy=signals.accuracy,
                        diversity=diversity, darling_div=darling_div, d_emb=d_emb, d_eq=d_eq)


def token_rows(response_masks: Sequence[Tensor], shaped: Tensor, weights: Tensor) -> tuple[list[Tensor], list[Tensor]]:
    """Per-rollout token rows for verl's TransferQueue: the shaped reward on the last valid response
    token (verl's outcome-reward convention; float64, see :mod:`.trainer`) and the coupling weight on
    every token (float32). ``response_masks``: one ``[T_i]`` 0/1 row per rollout."""
    if not len(response_masks) == shaped.shape[0] == weights.shape[0]:
        raise ValueError(f"{len(response_masks)} masks, {shaped.shape[0]} rewards, {weights.shape[0]} weights")
    scores, weight_rows = [], []
    for i, mask in enumerate(response_masks):
        row = torch.zeros(mask.shape[0], dtype=torch.float64)
        valid = torch.nonzero(mask).flatten()
        if valid.numel():
            row[int(valid[-1])] = shaped[i]
        scores.append(row)
        weight_rows.append(torch.full((mask.shape[0],), float(weights[i]), dtype=torch.float32))
    return scores, weight_rows


def _mean(values: Any) -> float | None:
    values = np.asarray(values, dtype=np.float64)
    return float(values.mean()) if values.size else None


def group_metrics(rewards: GroupRewards) -> dict[str, float]:
    """The step's reward metrics for verl's logger, named as in dsdr's metrics.jsonl
    (:class:`dsdr_train.stats.RewardStats`) under a ``dsdr/`` prefix (:mod:`.metrics_log` strips it)."""
    shaped = rewards.shaped
    out = {"dsdr/reward/mean": _mean(shaped.reward), "dsdr/shaped_reward/mean": _mean(shaped.shaped),
           "dsdr/bonus/mean": _mean(shaped.shaped - shaped.reward),
           "dsdr/acc/mean": _mean(rewards.accuracy),
           "dsdr/shaped_reward/std": float(shaped.shaped.std(unbiased=False)) if shaped.shaped.numel() else None}
    for name, values in (("semantic", rewards.d_emb), ("formula", rewards.d_eq)):
        if values is not None:
            out[f"dsdr/diversity/{name}"] = _mean(values)
            out[f"dsdr/similarity/{name}"] = None if _mean(values) is None else 1 - _mean(values)
    if rewards.darling_div is not None:
        out["dsdr/darling/div_mean"] = _mean(rewards.darling_div)
    return {k: v for k, v in out.items() if v is not None}
