"""The one dispatch site of each registry: per-rollout rewards -> advantages, and the policy loss.

    signals  = RolloutSignals(accuracy, group_ids, lengths, L_max, diversity=d, darling_div=div)
    shaped   = shape_rewards(signals, config)        # reward shaping + overlong term -> advantage
    pg, st   = policy_loss(config, logp, old_logp, shaped.advantages[rows], mask, **divisors)

``shape_rewards`` computes (docs/ALGORITHMS.md):

    reward   = r + overlong_term                                     # §2, Eq. 6 (0 unless DAPO)
    shaped   = REWARD_SHAPING_REGISTRY[config.reward](signals) + overlong_term
               # verifier: r | dsdr: §3.2, Eq. 11 | darling: §4, Eq. 16
    A        = ADV_ESTIMATOR_REGISTRY[config.adv_estimator](shaped, group_ids)   # §1, Eq. 1 / §4, Eq. 17
    w        = dsdr_coupling_weights(r, d, group_ids)                # §3.3, Eq. 12 (local term only)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dsdr_train.core_algos.registry import (ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY, REWARD_SHAPING_REGISTRY,
                                          get_adv_estimator_fn, get_policy_loss_fn, get_reward_shaping_fn)
from dsdr_train.core_algos.rewards import dsdr_coupling_weights, overlong_term
from dsdr_train.core_algos.types import RolloutSignals
from dsdr_train.objective import ObjectiveConfig


@dataclass(frozen=True)
class ShapedRewards:
    """Per-rollout results of :func:`shape_rewards`, all ``[B]``: ``reward`` (verifier outcome plus
    the overlong term, float64), ``shaped`` (what the advantage is computed from, float64),
    ``advantages`` (float64; the policy loss casts them to the log-probs' dtype), ``weights`` (coupling weights of the local term; zeros without it)."""

    reward: Tensor
    shaped: Tensor
    advantages: Tensor
    weights: Tensor


def shape_rewards(signals: RolloutSignals, config: ObjectiveConfig) -> ShapedRewards:
    """Rewards, advantages and coupling weights of one batch (see the module docstring)."""
    accuracy = signals.accuracy.to(torch.float64)
    overlong = overlong_term(signals, config)
    shaped = get_reward_shaping_fn(config.reward)(signals, config).to(torch.float64) + overlong
    advantages = get_adv_estimator_fn(config.adv_estimator)(
        shaped, signals.group_ids, std_mode=config.std_mode, eps=config.eps, singleton=config.singleton_advantage)
    diversity = signals.diversity if signals.diversity is not None else torch.zeros_like(accuracy)
    if config.local_term:
        weights = dsdr_coupling_weights(accuracy, diversity.to(torch.float64), signals.group_ids, tau=config.tau,
                                        sigma_d=config.sigma_d, uniform=bool(config.uniform_coupling))
    else:
        weights = torch.zeros_like(accuracy)
    return ShapedRewards(reward=accuracy + overlong, shaped=shaped, advantages=advantages, weights=weights)


def policy_loss(config: ObjectiveConfig, log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor,
                response_mask: Tensor, **divisors: float) -> tuple[Tensor, dict[str, float]]:
    """``POLICY_LOSS_REGISTRY[config.policy_loss]`` with the run's clip bounds, aggregation mode and
    log-ratio clamp; ``divisors``: the :func:`~dsdr_train.core_algos.losses.agg_divisors` keyword.
    Shapes: ``[B, T]`` log-probs / mask, ``[B]`` advantages -> (scalar, stats)."""
    return get_policy_loss_fn(config.policy_loss)(
        log_probs, old_log_probs, advantages, response_mask, clip_ratio_low=config.clip_ratio_low,
        clip_ratio_high=config.clip_ratio_high, loss_agg_mode=config.loss_agg_mode, clamp=config.log_ratio_clamp,
        **divisors)


def check_registered(config: ObjectiveConfig) -> None:
    """The names this config dispatches to exist in the registries (``ValueError`` naming the valid
    ones otherwise). Checked here, beside the dispatch, so the torch-free ``objective`` module
    imports nothing of core_algos."""
    for key, registry in (("reward", REWARD_SHAPING_REGISTRY), ("adv_estimator", ADV_ESTIMATOR_REGISTRY),
                          ("policy_loss", POLICY_LOSS_REGISTRY)):
        if getattr(config, key) not in registry:
            raise ValueError(f"{key}: unknown {getattr(config, key)!r}; expected one of {sorted(registry)}")
