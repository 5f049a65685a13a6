"""Per-rollout rewards: the shapings of the registry (verifier, DSDR bonus, DARLING), the DAPO
overlong term every shaping gets on top, and DSDR's coupling weights (docs/ALGORITHMS.md §2-§4).

Shapes: ``B`` = rollouts. Rewards stay float64 until the advantages are computed (see
:mod:`dsdr_train.core_algos.advantages`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dsdr_train.core_algos._checks import (as_group_ids, binary, group_index, require_1d, require_finite,
                                           require_float, require_same_shape, segment_max, segment_sum)
from dsdr_train.core_algos.registry import register_reward_shaping
from dsdr_train.core_algos.types import RolloutSignals
from dsdr_train.objective import ObjectiveConfig


def dsdr_shaped_rewards(
    rewards: Tensor, diversity: Tensor, *, lambda_d: float = 0.001, sigma_d: float = 1.0
) -> Tensor:
    """Correct-only bounded diversity bonus, docs/ALGORITHMS.md §3.2, Eq. 10 and Eq. 11 (DSDR, global scale).

    ``rtilde_i = r_i + lambda_d * clip(d_i, 0, sigma_d) * 1[r_i = 1]``.
    ``sigma_d`` is not given in the paper (default 1.0, i.e. the bound of ``d`` in [0, 1]).

    Args:
        rewards: ``[B]`` verifier outcome in {0, 1} (bool accepted). A non-binary value is an
            error: shaping an already shaped reward is a bug.
        diversity: ``[B]`` ``d_i`` from ``dsdr_eval.diversity_metrics.dsdr_diversity`` (§3.1, Eq. 9); only the
            entries of correct rollouts are read, and they must be finite.
        lambda_d: bonus scale (default 0.001; 0 for the w/o GD ablation).
        sigma_d: upper clip of ``d`` (> 0).

    Returns:
        ``[B]`` shaped rewards, dtype of ``rewards`` (float64 when rewards are bool/int, because
        the bonus is ~1e-4 of the reward; prefer float64 inputs for the same reason).
    """
    correct = binary("rewards", rewards)
    diversity = require_float("diversity", require_1d("diversity", diversity))
    require_same_shape([("rewards", rewards), ("diversity", diversity)])
    if not lambda_d >= 0:
        raise ValueError(f"lambda_d must be >= 0, got {lambda_d}")
    if not sigma_d > 0:
        raise ValueError(f"sigma_d must be > 0, got {sigma_d}")
    require_finite("diversity (of correct rollouts)", diversity[correct])
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float64
    r = correct.to(out_dtype)
    d_bar = diversity.to(out_dtype).clamp(0.0, sigma_d)
    bonus = torch.where(correct, lambda_d * d_bar, torch.zeros_like(d_bar))
    return r + bonus


def darling_rewards(rewards: Tensor, div: Tensor, *, floor: float = 0.1) -> Tensor:
    """DARLING multiplicative reward, docs/ALGORITHMS.md §4, Eq. 16 (DARLING paper).

    ``r_darling = r * max(Div, floor)`` with ``Div(o_i) = (G - |class(o_i)|) / (G - 1)`` (Eq. 15) from
    ``dsdr_eval.diversity_metrics.darling_div`` (which already floors; flooring again is idempotent).

    Args:
        rewards: ``[B]`` verifier outcome in {0, 1} (bool accepted).
        div: ``[B]`` DARLING diversity in [0, 1] (finite).
        floor: lower bound of ``Div`` (default 0.1), in [0, 1].

    Returns:
        ``[B]`` rewards, dtype of ``div``.
    """
    correct = binary("rewards", rewards)
    div = require_float("div", require_1d("div", div))
    require_same_shape([("rewards", rewards), ("div", div)])
    require_finite("div", div)
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor must be in [0, 1], got {floor}")
    return correct.to(div.dtype) * div.clamp(min=floor)


def dapo_overlong_penalty(
    response_lengths: Tensor, *, max_response_length: int, buffer: int | None = None, factor: float = 1.0
) -> Tensor:
    """DAPO soft overlong punishment, docs/ALGORITHMS.md §2, Eq. 6 (the DAPO paper's Eq. 13).

    ``penalty = min(0, -(L - (L_max - buffer)) / buffer * factor)``: 0 up to ``L_max - buffer``,
    then linear down to ``-factor`` at ``L = L_max``. Lengths past ``L_max`` (cannot happen when
    generation is capped at ``L_max``) get ``-factor``, the DAPO paper's value for them.
    Added to the reward as its own term (:func:`overlong_term`); never used for dynamic-sampling filtering.

    Args:
        response_lengths: ``[B]`` response lengths in tokens (>= 0; int or float).
        max_response_length: ``L_max`` (> 0).
        buffer: overlong buffer, in (0, L_max]; default ``L_max // 4``.
        factor: penalty factor (default 1.0, >= 0).

    Returns:
        ``[B]`` float64 penalties in [-factor, 0] (rewards stay float64, see module docstring).
    """
    lengths = require_1d("response_lengths", response_lengths)
    if max_response_length <= 0:
        raise ValueError(f"max_response_length must be > 0, got {max_response_length}")
    if buffer is None:
        buffer = max_response_length // 4
    if not 0 < buffer <= max_response_length:
        raise ValueError(f"buffer must be in (0, max_response_length={max_response_length}], got {buffer}")
    if not factor >= 0:
        raise ValueError(f"factor must be >= 0, got {factor}")
    lengths = lengths.to(torch.float64)
    require_finite("response_lengths", lengths)
    if bool((lengths < 0).any()):
        raise ValueError("response_lengths must be >= 0")
    exceed = lengths - (max_response_length - buffer)
    penalty = (-exceed / buffer * factor).clamp(min=-factor, max=0.0)
    return penalty


def dsdr_coupling_weights(
    rewards: Tensor,
    diversity: Tensor,
    group_ids: Tensor,
    *,
    tau: float = 5.0,
    sigma_d: float = 1.0,
    uniform: bool = False,
) -> Tensor:
    """Global-to-local coupling weights, docs/ALGORITHMS.md §3.3, Eq. 12 (DSDR).

    ``w_i = softmax_{i in P_g}(tau * clip(d_i, 0, sigma_d))`` over the correct rollouts ``P_g`` of
    the group of ``i``; ``w_i = 0`` outside ``P_g``; a group without a correct rollout gets all
    zeros (no local term for it). ``uniform=True`` gives ``1/|P_g|`` on ``P_g`` (the w/o GD
    ablation, §3.6). The softmax subtracts the per-group max (stable for any ``tau``).

    Args:
        rewards: ``[B]`` verifier outcome in {0, 1} (bool accepted; not the shaped reward).
        diversity: ``[B]`` ``d_i`` (§3.1); read only on correct rollouts (ignored when uniform).
        group_ids: ``[B]`` long.
        tau: softmax temperature multiplier (default 5, >= 0).
        sigma_d: clip of ``d`` as in §3.2 (default 1.0).
        uniform: uniform weights over ``P_g``.

    Returns:
        ``[B]`` weights >= 0 summing to 1 over each group that has a correct rollout; dtype of
        ``diversity`` (no gradient: it is a function of the rollouts only).
    """
    correct = binary("rewards", rewards)
    diversity = require_float("diversity", require_1d("diversity", diversity))
    require_same_shape([("rewards", rewards), ("diversity", diversity)])
    group_ids = as_group_ids(group_ids, rewards.shape[0])
    if not tau >= 0 or not math.isfinite(tau):
        raise ValueError(f"tau must be finite and >= 0, got {tau}")
    if not sigma_d > 0:
        raise ValueError(f"sigma_d must be > 0, got {sigma_d}")
    diversity = diversity.detach()
    if rewards.numel() == 0:
        return torch.zeros_like(diversity)
    if uniform:
        logits = torch.zeros_like(diversity)
    else:
        require_finite("diversity (of correct rollouts)", diversity[correct])
        logits = tau * torch.where(correct, diversity, torch.zeros_like(diversity)).clamp(0.0, sigma_d)
    logits = torch.where(correct, logits, torch.full_like(logits, -math.inf))
    index, n_groups = group_index(group_ids)
    group_max = segment_max(logits, index, n_groups)
    # groups without a correct rollout have max -inf: shift by 0 there so exp(-inf) = 0, no NaN
    shift = torch.where(torch.isfinite(group_max), group_max, torch.zeros_like(group_max))
    unnormalised = torch.exp(logits - shift[index])  # 0 outside P
    totals = segment_sum(unnormalised, index, n_groups)
    return torch.where(correct, unnormalised / totals[index].clamp(min=torch.finfo(totals.dtype).tiny), 0.0)


@register_reward_shaping("verifier")
def verifier_reward(signals: RolloutSignals, config: ObjectiveConfig) -> Tensor:
    """The verifier's 0/1 outcome as is (GRPO, DAPO). ``[B]`` -> ``[B]`` float64."""
    return binary("accuracy", signals.accuracy).to(torch.float64)


@register_reward_shaping("dsdr")
def dsdr_reward(signals: RolloutSignals, config: ObjectiveConfig) -> Tensor:
    """DSDR's bonus, docs/ALGORITHMS.md §3.2, Eq. 11 (``lambda_d = 0`` for w/o GD). ``[B]`` -> ``[B]`` float64."""
    return dsdr_shaped_rewards(signals.accuracy.to(torch.float64), signals.required("diversity", "dsdr"),
                               lambda_d=config.lambda_d, sigma_d=config.sigma_d)


@register_reward_shaping("darling")
def darling_reward(signals: RolloutSignals, config: ObjectiveConfig) -> Tensor:
    """DARLING's ``r * Div``, docs/ALGORITHMS.md §4, Eq. 16. ``[B]`` -> ``[B]`` float64."""
    return darling_rewards(signals.accuracy, signals.required("darling_div", "darling").to(torch.float64),
                           floor=config.darling_floor)


def overlong_term(signals: RolloutSignals, config: ObjectiveConfig) -> Tensor:
    """The DAPO overlong term (docs/ALGORITHMS.md §2, Eq. 6) of every rollout, zeros when
    ``overlong_shaping`` is off. ``[B]`` float64, added to whichever shaping the run uses."""
    if not config.overlong_shaping:
        return torch.zeros(signals.accuracy.shape[0], dtype=torch.float64)
    return dapo_overlong_penalty(signals.response_lengths, max_response_length=signals.max_response_length,
                                 buffer=config.overlong_buffer, factor=config.overlong_factor)
