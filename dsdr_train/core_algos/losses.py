"""Token-level losses: loss aggregation, the clipped surrogate, the KL penalty, the token entropy
metric and DSDR's local entropy term (docs/ALGORITHMS.md §1, §3.4).

Shapes: ``B`` rollouts, ``T`` padded response length, ``V`` vocabulary. How they make the loss
of one update (§3.5, Eq. 14; the loss is ``-J``)::

    pg, stats = compute_policy_loss(logp, old_logp, A, mask, ...)           # Eq. 2-4
    J_local   = dsdr_local_entropy_term(logp, old_logp, mask, w, ...)       # Eq. 13
    loss      = pg - lambda_l * J_local + kl_coef * agg_loss(kl_penalty_k3(logp, ref_logp), mask, mode)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dsdr_train.core_algos._checks import (mask_as, require_1d, require_2d, require_finite, require_float,
                                           require_same_shape, require_tensor)
from dsdr_train.core_algos.registry import register_policy_loss
from dsdr_train.objective import LOSS_AGG_MODES


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over ``mask == 1`` (0 when the mask is empty). Same shapes -> scalar."""
    mask = mask.to(values.dtype)
    return (torch.where(mask.bool(), values, torch.zeros_like(values))).sum() / mask.sum().clamp(min=1.0)


def agg_loss(
    loss_mat: Tensor,
    loss_mask: Tensor,
    loss_agg_mode: str,
    *,
    norm_constant: float | None = None,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
) -> Tensor:
    """Reduce a per-token loss matrix to a scalar, docs/ALGORITHMS.md §1, Eq. 4a-4d (verl's modes and formulas).

    * ``token-mean`` (DAPO, Eq. 4a): ``sum_{i,t} m*l / sum_{i,t} m``.
    * ``seq-mean-token-mean`` (Eq. 4b; the DSDR paper's GRPO Eq. 3): mean over sequences of
      ``sum_t m*l / T_i``.
    * ``seq-mean-token-sum`` (Eq. 4c): mean over sequences of ``sum_t m*l``.
    * ``seq-mean-token-sum-norm`` (Dr.GRPO, Eq. 4d): ``sum_{i,t} m*l / (|B| * C)`` with ``|B|`` the
      sequences (as in the two seq-mean modes) and ``C = norm_constant`` when given, else
      ``loss_mask.shape[-1]`` (the padded length, verl's default). Dr.GRPO wants a constant ``C``
      over training (e.g. the max response length): pass ``norm_constant``, since the padded
      length changes from batch to batch.

    Rows with no valid token (padding rows) are left out of the sequence means (verl would
    return NaN for them in ``seq-mean-token-mean``). Masked entries of ``loss_mat`` may hold
    anything, even inf/NaN: they are selected out, not multiplied by 0.

    Pieces of a batch (gradient accumulation, data parallelism): every mode is a sum over the
    rows divided by a divisor of the *whole* batch, so a piece's loss computed with the whole
    batch's divisor is its exact share, and the shares add up to the one-pass loss. Pass the
    whole batch's ``num_tokens`` (token-mean) or ``num_sequences`` (the three seq modes; rows
    with at least one valid token) as verl's ``batch_num_tokens`` / ``global_batch_size`` do;
    ``seq-mean-token-sum-norm`` also needs its constant ``C``.
    :func:`agg_divisors` returns the keyword a mode needs. (DDP averages gradients over ranks:
    the caller multiplies the loss by the world size, verl's ``dp_size``.)

    Args:
        loss_mat: ``[B, T]`` per-token loss.
        loss_mask: ``[B, T]`` 0/1 (bool accepted).
        loss_agg_mode: one of :data:`LOSS_AGG_MODES`.
        norm_constant: ``C`` for ``seq-mean-token-sum-norm`` (> 0); an error for other modes.
        num_tokens: divisor of ``token-mean`` (> 0) instead of this piece's token count; an error
            for other modes.
        num_sequences: ``|B|`` of ``seq-mean-token-mean`` / ``seq-mean-token-sum`` /
            ``seq-mean-token-sum-norm`` (> 0) instead of this piece's number of non-empty rows; an
            error for ``token-mean``.

    Returns:
        scalar loss.
    """
    loss_mat = require_float("loss_mat", require_2d("loss_mat", loss_mat))
    require_same_shape([("loss_mat", loss_mat), ("loss_mask", require_2d("loss_mask", loss_mask))])
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; expected one of {LOSS_AGG_MODES}")
    for name, value, modes in (("norm_constant", norm_constant, ("seq-mean-token-sum-norm",)),
                               ("num_tokens", num_tokens, ("token-mean",)),
                               ("num_sequences", num_sequences, ("seq-mean-token-mean", "seq-mean-token-sum",
                                                                 "seq-mean-token-sum-norm"))):
        if value is None:
            continue
        if loss_agg_mode not in modes:
            raise ValueError(f"{name} only applies to {' / '.join(modes)}, not {loss_agg_mode!r}")
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    mask = mask_as("loss_mask", loss_mask, loss_mat)
    masked = torch.where(mask.bool(), loss_mat, torch.zeros_like(loss_mat))
    token_sums = masked.sum(dim=-1)
    lengths = mask.sum(dim=-1)
    if num_sequences is None:
        n_sequences = (lengths > 0).sum().to(loss_mat.dtype).clamp(min=1.0)
    else:
        n_sequences = torch.tensor(float(num_sequences), dtype=loss_mat.dtype, device=loss_mat.device)
    if loss_agg_mode == "token-mean":
        n_tokens = lengths.sum().clamp(min=1.0) if num_tokens is None else float(num_tokens)
        return token_sums.sum() / n_tokens
    if loss_agg_mode == "seq-mean-token-mean":
        return (token_sums / lengths.clamp(min=1.0)).sum() / n_sequences
    if loss_agg_mode == "seq-mean-token-sum":
        return token_sums.sum() / n_sequences
    divisor = float(norm_constant) if norm_constant is not None else float(loss_mask.shape[-1])
    return token_sums.sum() / (n_sequences * max(divisor, 1.0))  # Eq. 4d: |B| * L_max


def agg_divisors(
    loss_agg_mode: str, *, num_tokens: float, num_sequences: float, norm_constant: float | None = None
) -> dict[str, float]:
    """The :func:`agg_loss` keyword that makes a piece's loss its exact share of a whole batch.

    Args:
        loss_agg_mode: one of :data:`LOSS_AGG_MODES`.
        num_tokens: valid tokens of the whole batch (over all micro-batches and all ranks).
        num_sequences: rows with at least one valid token in the whole batch.
        norm_constant: ``C`` of ``seq-mean-token-sum-norm``; required for that mode (a constant
            over training, e.g. the max response length: the padded width of a piece is not).

    Returns:
        ``{"num_tokens": ...}``, ``{"num_sequences": ...}`` or, for Eq. 4d,
        ``{"num_sequences": ..., "norm_constant": ...}`` (counts floored at 1, so an all-empty
        batch gives a zero loss rather than 0/0).
    """
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; expected one of {LOSS_AGG_MODES}")
    if loss_agg_mode == "token-mean":
        return {"num_tokens": max(float(num_tokens), 1.0)}
    if loss_agg_mode == "seq-mean-token-sum-norm":
        if norm_constant is None:
            raise ValueError("seq-mean-token-sum-norm needs a norm_constant (e.g. max_response_length)")
        return {"num_sequences": max(float(num_sequences), 1.0), "norm_constant": float(norm_constant)}
    return {"num_sequences": max(float(num_sequences), 1.0)}


@register_policy_loss("vanilla")
def compute_policy_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    loss_agg_mode: str = "token-mean",
    clamp: float = 20.0,
    norm_constant: float | None = None,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO/GRPO clipped surrogate, docs/ALGORITHMS.md §1, Eq. 2 and Eq. 3 (DAPO's clip-higher via the bounds).

    Per token ``rho = exp(clip(logp - logp_old, -clamp, clamp))`` and the objective
    ``min(rho * A, clip(rho, 1 - clip_ratio_low, 1 + clip_ratio_high) * A)``; the loss matrix is
    its negative, reduced by :func:`agg_loss` (Eq. 4a-4d). (No verl dual-clip: the papers do not use it.)

    Args:
        log_probs: ``[B, T]`` ``logp_theta`` of the sampled tokens (with grad).
        old_log_probs: ``[B, T]`` ``logp_old`` (detached here).
        advantages: ``[B]`` (broadcast to every token) or ``[B, T]``.
        response_mask: ``[B, T]`` 0/1.
        clip_ratio_low / clip_ratio_high: ``eps_low`` / ``eps_high`` (GRPO 0.2/0.2, DAPO and DSDR
            0.2/0.28).
        loss_agg_mode: see :func:`agg_loss`; ``norm_constant`` / ``num_tokens`` /
            ``num_sequences`` are passed through to it (see :func:`agg_divisors`).
        clamp: bound of the log-ratio (default 20).

    Returns:
        ``(pg_loss, stats)``: scalar loss to minimise, and python floats over valid tokens:
        ``clip/frac`` (fraction where the clipped branch is strictly smaller, i.e. the gradient is
        cut), ``clip/frac_low`` (of those, ``A < 0`` and ``rho < 1 - eps_low``), ``clip/frac_high``
        (``A > 0`` and ``rho > 1 + eps_high``), ``kl/approx`` (k3 estimate ``rho - 1 - log rho``
        of KL(pi_old || pi_theta): unbiased under ``o ~ pi_old`` and never negative; verl logs the
        k1 ``mean(logp_old - logp)`` as ``ppo_kl`` instead), ``ratio/mean``, ``ratio/min``,
        ``ratio/max`` (0 for an empty mask).
    """
    log_probs, old_log_probs, advantages, mask = _policy_loss_inputs(
        log_probs, old_log_probs, advantages, response_mask, clip_ratio_low, clip_ratio_high, clamp)
    log_ratio = (log_probs - old_log_probs).clamp(-clamp, clamp)
    ratio = torch.exp(log_ratio)  # Eq. 2
    surrogate = ratio * advantages
    clipped_surrogate = ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high) * advantages
    loss_mat = -torch.minimum(surrogate, clipped_surrogate)  # Eq. 3
    pg_loss = agg_loss(loss_mat, mask, loss_agg_mode, norm_constant=norm_constant, num_tokens=num_tokens,
                       num_sequences=num_sequences)
    with torch.no_grad():
        stats = _clip_stats(ratio, log_ratio, advantages, surrogate, clipped_surrogate, mask)
    return pg_loss, stats


def _policy_loss_inputs(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, response_mask: Tensor,
                        clip_ratio_low: float, clip_ratio_high: float, clamp: float
                        ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Validated ``[B, T]`` log-probs, old log-probs (detached), advantages (broadcast, detached)
    and the float mask, with padding positions zeroed (they may hold -inf/NaN: NaN-safe grads)."""
    log_probs = require_float("log_probs", require_2d("log_probs", log_probs))
    old_log_probs = require_2d("old_log_probs", old_log_probs)
    require_same_shape([("log_probs", log_probs), ("old_log_probs", old_log_probs), ("response_mask", response_mask)])
    advantages = require_float("advantages", require_tensor("advantages", advantages))
    if advantages.dim() == 1:
        if advantages.shape[0] != log_probs.shape[0]:
            raise ValueError(
                f"shape mismatch: log_probs has {log_probs.shape[0]} rows but advantages has {advantages.shape[0]}"
            )
        advantages = advantages.unsqueeze(-1).expand_as(log_probs)
    elif advantages.shape != log_probs.shape:
        raise ValueError(
            f"advantages must have shape [B] or [B, T] = {tuple(log_probs.shape)}, got {tuple(advantages.shape)}"
        )
    if not (0 <= clip_ratio_low < 1) or not clip_ratio_high >= 0:
        raise ValueError(
            f"need 0 <= clip_ratio_low < 1 and clip_ratio_high >= 0, got ({clip_ratio_low}, {clip_ratio_high})"
        )
    if not clamp > 0:
        raise ValueError(f"clamp must be > 0, got {clamp}")
    mask = mask_as("response_mask", response_mask, log_probs)
    valid = mask.bool()
    advantages = advantages.detach().to(log_probs.dtype)
    require_finite("advantages", advantages[valid])
    zeros = torch.zeros_like(log_probs)
    return (torch.where(valid, log_probs, zeros), torch.where(valid, old_log_probs.detach().to(log_probs.dtype), zeros),
            torch.where(valid, advantages, zeros), mask)


def _clip_stats(ratio: Tensor, log_ratio: Tensor, advantages: Tensor, surrogate: Tensor, clipped_surrogate: Tensor,
                mask: Tensor) -> dict[str, float]:
    """The stats of :func:`compute_policy_loss` over the valid tokens (see its docstring)."""
    valid = mask.bool()
    clipped = (clipped_surrogate < surrogate) & valid
    n_valid = float(valid.sum().clamp(min=1).item())
    valid_ratio = ratio[valid]
    k3 = ratio - 1.0 - log_ratio
    return {
        "clip/frac": float(clipped.sum().item()) / n_valid,
        "clip/frac_low": float((clipped & (advantages < 0)).sum().item()) / n_valid,
        "clip/frac_high": float((clipped & (advantages > 0)).sum().item()) / n_valid,
        "kl/approx": float(masked_mean(k3, mask).item()),
        "ratio/mean": float(valid_ratio.mean().item()) if valid_ratio.numel() else 0.0,
        "ratio/min": float(valid_ratio.min().item()) if valid_ratio.numel() else 0.0,
        "ratio/max": float(valid_ratio.max().item()) if valid_ratio.numel() else 0.0,
    }


def kl_penalty_k3(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """Per-token ``low_var_kl`` (Schulman's k3) to a reference policy, docs/ALGORITHMS.md §1, Eq. 5 (optional).

    ``kl = logp_ref - logp``, clamped to [-20, 20]; ``k3 = exp(kl) - kl - 1`` clamped to
    [-10, 10] (verl's ``kl_penalty(..., "low_var_kl")``). Estimates KL(pi_theta || pi_ref) on
    tokens sampled from the policy; >= 0, and 0 where the two log-probs are equal.

    Args:
        log_probs: ``[B, T]`` (with grad). ref_log_probs: ``[B, T]`` (detached here).

    Returns:
        ``[B, T]``; reduce with :func:`agg_loss` and the run's ``loss_agg_mode``.
    """
    log_probs = require_float("log_probs", require_2d("log_probs", log_probs))
    ref_log_probs = require_2d("ref_log_probs", ref_log_probs)
    require_same_shape([("log_probs", log_probs), ("ref_log_probs", ref_log_probs)])
    kl = (ref_log_probs.detach() - log_probs).clamp(-20.0, 20.0)
    return (torch.exp(kl) - kl - 1.0).clamp(-10.0, 10.0)


def token_entropy_from_logits(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Per-token entropy of ``softmax(logits / temperature)`` (the ``entropy/mean`` metric).

    Uses ``log_softmax`` (a logsumexp): no overflow for large logits; ``-inf`` logits (masked
    vocabulary) contribute 0 rather than NaN. Pass the rollout temperature so the metric is the
    entropy of the distribution that was sampled.

    Args:
        logits: ``[B, T, V]``. temperature: > 0.

    Returns:
        ``[B, T]`` entropies in nats (dtype of ``logits``; promote to float32 first for bf16).
    """
    logits = require_float("logits", require_tensor("logits", logits))
    if logits.dim() != 3:
        raise ValueError(f"logits must have shape [B, T, V], got {tuple(logits.shape)}")
    if not temperature > 0 or not math.isfinite(temperature):
        raise ValueError(f"temperature must be finite and > 0, got {temperature}")
    log_p = torch.log_softmax(logits / temperature, dim=-1)
    p_log_p = torch.where(torch.isfinite(log_p), log_p.exp() * log_p, torch.zeros_like(log_p))
    return -p_log_p.sum(dim=-1)


def dsdr_local_entropy_term(
    log_probs: Tensor,
    old_log_probs: Tensor,
    response_mask: Tensor,
    weights: Tensor,
    *,
    clamp: float = 20.0,
    num_groups: float | None = None,
) -> Tensor:
    """Local, length-normalised, correct-only entropy term ``J_local``, docs/ALGORITHMS.md §3.4, Eq. 13.

    ``J_local = - sum_i w_i * (1/T_i) * sum_t rho_{i,t} * logp_theta(o_{i,t})`` with
    ``rho_{i,t} = exp(clip(logp_theta - logp_old, -clamp, clamp))`` NOT detached and the
    correct-only indicator folded into ``w`` (:func:`dsdr_coupling_weights` is 0 outside P).
    Returned as the quantity to MAXIMISE: the loss adds ``-lambda_l * J_local``.

    Why rho is not detached: sampling ``o ~ pi_old``, ``E[rho * log pi_theta] = sum_a pi_theta(a)
    log pi_theta(a) = -H(pi_theta)`` at every visited prefix, so ``E[J_local]`` is the weighted
    mean per-token entropy and, at ``theta = theta_old``, ``grad E[J_local] = grad`` of that mean
    entropy with the prefix distribution held fixed. With rho detached the expected gradient is
    ``-sum_a grad pi_theta(a) = 0``: the term would do nothing on average. Exact when ``T_i``
    does not depend on the token being scored (fixed length); when EOS decides ``T_i``, the
    ``1/T_i`` of §3.4 makes the value and gradient deviate from the mean entropy (a property of
    the paper's length normalisation). All three facts are checked by exact enumeration in
    ``tests/train/test_core_algos.py``.

    Batch normalisation: §3.4 is written per prompt (the ``w_i`` sum to 1 over P, no 1/G), so the
    plain sum over a batch holding several groups grows with the number of groups. The objective
    is an expectation over prompts like ``J_GRPO``; pass ``num_groups`` = the number of prompts in
    the (mini-)batch the update normalises over (under gradient accumulation and data
    parallelism: the whole mini-batch over all micro-batches and ranks) to get that mean.
    ``None`` returns the literal sum. The trainer's ``local_norm`` picks the divisor: ``prompts``
    (default), ``correct_prompts`` (only the prompts that have a local term, i.e. a correct
    rollout) or ``none`` (the literal sum of the per-prompt terms).

    Args:
        log_probs: ``[B, T]`` ``logp_theta`` of the sampled tokens (with grad).
        old_log_probs: ``[B, T]`` ``logp_old`` of the same tokens (detached here).
        response_mask: ``[B, T]`` 1 on response tokens; ``T_i`` = its row sum (rows with no token
            contribute 0).
        weights: ``[B]`` coupling weights (detached here).
        clamp: bound of the log-ratio before ``exp`` (§1, default 20).
        num_groups: divide the sum by this (> 0) when given.

    Returns:
        scalar ``J_local`` (to maximise), dtype of ``log_probs``.
    """
    log_probs = require_float("log_probs", require_2d("log_probs", log_probs))
    old_log_probs = require_2d("old_log_probs", old_log_probs)
    require_same_shape([("log_probs", log_probs), ("old_log_probs", old_log_probs), ("response_mask", response_mask)])
    mask = mask_as("response_mask", response_mask, log_probs)
    weights = require_1d("weights", weights)
    if weights.shape[0] != log_probs.shape[0]:
        raise ValueError(f"shape mismatch: log_probs has {log_probs.shape[0]} rows but weights has {weights.shape[0]}")
    require_finite("weights", weights)
    if bool((weights < 0).any()):
        raise ValueError("weights must be >= 0 (coupling weights are a softmax over correct rollouts)")
    if not clamp > 0:
        raise ValueError(f"clamp must be > 0, got {clamp}")
    if num_groups is not None and not num_groups > 0:
        raise ValueError(f"num_groups must be > 0, got {num_groups}")

    valid = mask.bool()
    # masked positions may hold garbage (-inf log-probs of pad tokens): replace them before any
    # arithmetic, so no NaN can leak into the gradient through 0 * inf
    log_probs = torch.where(valid, log_probs, torch.zeros_like(log_probs))
    old_log_probs = torch.where(valid, old_log_probs.detach().to(log_probs.dtype), torch.zeros_like(log_probs))
    log_ratio = (log_probs - old_log_probs).clamp(-clamp, clamp)
    ratio = torch.exp(log_ratio)  # rho, NOT detached (see docstring)
    per_token = torch.where(valid, ratio * log_probs, torch.zeros_like(log_probs))
    lengths = mask.sum(dim=-1)
    per_sequence = per_token.sum(dim=-1) / lengths.clamp(min=1.0)
    j_local = -(weights.detach().to(log_probs.dtype) * per_sequence).sum()
    if num_groups is not None:
        j_local = j_local / num_groups
    return j_local
