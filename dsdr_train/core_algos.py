"""The RL objective of GRPO, DAPO, DSDR (and its ablations) and DARLING as pure torch functions.

Section numbers (§) refer to ``ALGORITHMS.md`` (``../shared/docs/`` from the repo root), which assembles the DSDR paper
(arXiv 2602.19895) and the DARLING paper (arXiv 2509.02534); DAPO is arXiv 2503.14476.

Modelled on verl's ``verl/trainer/ppo/core_algos.py``: the advantage estimators and policy losses
are kept in name registries (``register_adv_estimator`` / ``register_policy_loss``) and the loss
matrix is reduced by ``agg_loss`` with verl's mode names, so the same functions can be registered
in verl later and the numbers stay comparable.

Shapes: ``B`` = number of rollouts in the (micro-)batch (all groups concatenated, any order),
``T`` = padded response length, ``V`` = vocabulary size. Every rollout of one prompt shares one
group id and no other rollout does (§1).

How the pieces make the loss of one update (§3.5; the loss is ``-J``)::

    rtilde  = dsdr_shaped_rewards(r, d, lambda_d=, sigma_d=)            # §3.2  (DSDR)
            | darling_rewards(r, div, floor=)                           # §4    (DARLING)
            | r + dapo_overlong_penalty(L, max_response_length=)        # §2    (DAPO)
    A       = compute_group_advantage(rtilde, group_ids, std_mode=, eps=)   # §1
    keep    = dapo_keep_groups(r, group_ids)                            # §2 (on r, never rtilde)
    w       = dsdr_coupling_weights(r, d, group_ids, tau=, sigma_d=)    # §3.3
    pg, st  = compute_policy_loss(logp, old_logp, A, mask, ...)         # §1
    J_local = dsdr_local_entropy_term(logp, old_logp, mask, w) / n_prompts   # §3.4 (see there)
    loss    = pg - lambda_l * J_local + kl_coef * agg_loss(kl_penalty_k3(logp, ref_logp), mask, mode)

Precision: in an all-correct DSDR group the rewards differ only by ``lambda_d * d`` (~1e-4), so
keep the per-rollout rewards in float64 until the advantages are computed (they are B numbers);
``compute_group_advantage`` computes its group statistics in float64 whatever the input dtype.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

__all__ = [
    "ADV_ESTIMATOR_REGISTRY",
    "ALGO_DEFAULTS",
    "ALGO_NOTES",
    "COMMON_NOTES",
    "DAPO_EXHAUSTED",
    "LOCAL_NORMS",
    "LOSS_AGG_MODES",
    "POLICY_LOSS_REGISTRY",
    "SINGLETON_ADVANTAGES",
    "STD_MODES",
    "ObjectiveConfig",
    "agg_divisors",
    "agg_loss",
    "compute_darling_advantage",
    "compute_dsdr_advantage",
    "compute_group_advantage",
    "compute_policy_loss",
    "dapo_keep_groups",
    "dapo_overlong_penalty",
    "darling_rewards",
    "dsdr_coupling_weights",
    "dsdr_local_entropy_term",
    "dsdr_shaped_rewards",
    "get_adv_estimator_fn",
    "get_policy_loss_fn",
    "group_ids_from_prompt_index",
    "kl_penalty_k3",
    "masked_mean",
    "objective_config",
    "register_adv_estimator",
    "register_policy_loss",
    "token_entropy_from_logits",
]

STD_MODES = ("population", "bessel", "none")
SINGLETON_ADVANTAGES = ("zero", "reward")  # the advantage of a group of one (see compute_group_advantage)
LOCAL_NORMS = ("prompts", "correct_prompts", "none")  # J_local's batch divisor (see dsdr_local_entropy_term)
DAPO_EXHAUSTED = ("train", "error")  # dynamic sampling out of max_num_gen_batches (see ObjectiveConfig)
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
REWARD_KINDS = ("verifier", "dsdr", "darling")

# --------------------------------------------------------------------------------------------
# Registries (verl style)
# --------------------------------------------------------------------------------------------

F = TypeVar("F", bound=Callable[..., Any])

ADV_ESTIMATOR_REGISTRY: dict[str, Callable[..., Tensor]] = {}
POLICY_LOSS_REGISTRY: dict[str, Callable[..., tuple[Tensor, dict[str, float]]]] = {}


def _registrar(registry: dict[str, Callable[..., Any]], kind: str, name: str) -> Callable[[F], F]:
    """Decorator registering a function under ``name`` in ``registry``; a second, different function
    under the same name is an error, so two modules cannot silently shadow each other."""

    def decorator(fn: F) -> F:
        existing = registry.get(name)
        if existing is not None and existing is not fn:
            raise ValueError(f"{kind} {name!r} is already registered ({existing.__qualname__})")
        registry[name] = fn
        return fn

    return decorator


def _lookup(registry: dict[str, Callable[..., Any]], kind: str, name: str) -> Callable[..., Any]:
    try:
        return registry[name]
    except KeyError:
        raise ValueError(f"unknown {kind} {name!r}; registered: {sorted(registry)}") from None


def register_adv_estimator(name: str) -> Callable[[F], F]:
    """Decorator: register an advantage estimator under ``name``."""
    return _registrar(ADV_ESTIMATOR_REGISTRY, "advantage estimator", name)


def get_adv_estimator_fn(name: str) -> Callable[..., Tensor]:
    """The advantage estimator registered under ``name``."""
    return _lookup(ADV_ESTIMATOR_REGISTRY, "advantage estimator", name)


def register_policy_loss(name: str) -> Callable[[F], F]:
    """Decorator: register a policy loss under ``name``."""
    return _registrar(POLICY_LOSS_REGISTRY, "policy loss", name)


def get_policy_loss_fn(name: str) -> Callable[..., tuple[Tensor, dict[str, float]]]:
    """The policy loss registered under ``name``."""
    return _lookup(POLICY_LOSS_REGISTRY, "policy loss", name)


# --------------------------------------------------------------------------------------------
# Input validation (clear ValueErrors naming the argument)
# --------------------------------------------------------------------------------------------


def _require_tensor(name: str, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def _require_1d(name: str, x: Any) -> Tensor:
    x = _require_tensor(name, x)
    if x.dim() != 1:
        raise ValueError(f"{name} must have shape [B], got {tuple(x.shape)}")
    return x


def _require_2d(name: str, x: Any) -> Tensor:
    x = _require_tensor(name, x)
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape [B, T], got {tuple(x.shape)}")
    return x


def _require_same_shape(names_and_tensors: Sequence[tuple[str, Tensor]]) -> None:
    first_name, first = names_and_tensors[0]
    for name, x in names_and_tensors[1:]:
        if x.shape != first.shape:
            raise ValueError(
                f"shape mismatch: {first_name} has shape {tuple(first.shape)} but {name} has {tuple(x.shape)}"
            )


def _require_float(name: str, x: Tensor) -> Tensor:
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def _require_finite(name: str, x: Tensor) -> None:
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        bad = int(torch.nonzero(~torch.isfinite(x))[0][0])
        raise ValueError(f"{name} has a non-finite value ({x.reshape(-1)[bad].item()}) at flat index {bad}")


def _as_group_ids(group_ids: Any, batch: int) -> Tensor:
    group_ids = _require_1d("group_ids", group_ids)
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool or group_ids.is_complex():
        raise ValueError(f"group_ids must be an integer tensor (torch.long), got dtype {group_ids.dtype}")
    if group_ids.shape[0] != batch:
        raise ValueError(f"shape mismatch: rewards has {batch} rollouts but group_ids has {group_ids.shape[0]}")
    return group_ids.long()


def _binary(name: str, x: Any) -> Tensor:
    """A 0/1 verifier outcome as a bool tensor; anything else (e.g. a shaped reward) is an error."""
    x = _require_1d(name, x)
    if x.dtype == torch.bool:
        return x
    is_one = x == 1
    if not bool((is_one | (x == 0)).all()):
        bad = int(torch.nonzero(~(is_one | (x == 0)))[0][0])
        raise ValueError(
            f"{name} must be the verifier's 0/1 outcome (never a shaped reward); "
            f"got {x[bad].item()} at index {bad}"
        )
    return is_one


def _mask_as(name: str, mask: Tensor, like: Tensor) -> Tensor:
    mask = _require_2d(name, mask)
    if mask.dtype != torch.bool and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{name} must contain only 0/1 (or be bool)")
    return mask.to(like.dtype)


def _group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Dense group index in [0, n_groups) per rollout, and n_groups. Ids need not be contiguous."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    return inverse, n_groups


def _segment_sum(values: Tensor, index: Tensor, n_groups: int) -> Tensor:
    return torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, index, values)


def _segment_max(values: Tensor, index: Tensor, n_groups: int) -> Tensor:
    out = torch.full((n_groups,), -math.inf, dtype=values.dtype, device=values.device)
    return out.scatter_reduce(0, index, values, reduce="amax", include_self=True)


# --------------------------------------------------------------------------------------------
# Group ids
# --------------------------------------------------------------------------------------------


def group_ids_from_prompt_index(
    prompt_index: Tensor | Sequence[Hashable], *, expected_group_size: int | None = None
) -> Tensor:
    """Dense group ids (§1: every rollout of one prompt shares one group id, no other rollout does).

    Args:
        prompt_index: ``[B]`` one key per rollout naming its prompt (a tensor of ints, or a list of
            any hashable: problem ids, ``(epoch, problem_id)`` tuples, ...). Rollouts of one prompt
            may be interleaved with others.
        expected_group_size: when given, every group must have exactly this many rollouts (catches
            a prompt sampled twice in one batch under one key, or a lost rollout).

    Returns:
        ``[B]`` torch.long, ids ``0..n_groups-1`` numbered in order of first appearance.
    """
    if isinstance(prompt_index, Tensor):
        if prompt_index.dim() != 1:
            raise ValueError(f"prompt_index must have shape [B], got {tuple(prompt_index.shape)}")
        keys: list[Hashable] = prompt_index.tolist()
    else:
        keys = list(prompt_index)
    first_seen: dict[Hashable, int] = {}
    ids = []
    for position, key in enumerate(keys):
        try:
            ids.append(first_seen.setdefault(key, len(first_seen)))
        except TypeError:
            raise ValueError(f"prompt_index[{position}] = {key!r} is not hashable") from None
    out = torch.tensor(ids, dtype=torch.long)
    if expected_group_size is not None:
        if expected_group_size < 1:
            raise ValueError(f"expected_group_size must be >= 1, got {expected_group_size}")
        counts = torch.bincount(out, minlength=len(first_seen)) if ids else torch.zeros(0, dtype=torch.long)
        wrong = torch.nonzero(counts != expected_group_size)
        if wrong.numel():
            group = int(wrong[0][0])
            key = next(k for k, v in first_seen.items() if v == group)
            raise ValueError(
                f"prompt {key!r} has {int(counts[group])} rollouts, expected {expected_group_size} per group"
            )
    return out


# --------------------------------------------------------------------------------------------
# §1 GRPO advantage
# --------------------------------------------------------------------------------------------


@register_adv_estimator("grpo")
def compute_group_advantage(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    std_mode: str = "population",
    eps: float = 1e-6,
    singleton: str = "zero",
) -> Tensor:
    """Group-relative advantage, ALGORITHMS.md §1 (DSDR paper's GRPO advantage).

    ``A_i = (r_i - mean_g(r)) / (std_g(r) + eps)`` over the rollouts of the group ``g`` of ``i``;
    ``std_mode``: ``"population"`` (divide by G; what DSDR states), ``"bessel"`` (divide by G-1;
    ``torch.std``'s default, which verl's GRPO estimator uses), ``"none"`` (``A_i = r_i - mean``,
    Dr.GRPO / DARLING). The caller broadcasts ``A_i`` to every token of ``o_i``.

    A group of one rollout (G = 1; the papers are silent): ``singleton="zero"`` (default) gives
    it advantage 0 in every mode (a lone rollout has nothing to be compared with, so it carries
    no signal); ``singleton="reward"`` is verl's convention, mean 0 and std 1, i.e.
    ``A = r / (1 + eps)`` (``A = r`` with ``std_mode="none"``). Statistics are computed in
    float64 (see the module docstring).

    Args:
        rewards: ``[B]`` float (bool/int accepted) per-rollout reward, possibly shaped.
        group_ids: ``[B]`` long; see :func:`group_ids_from_prompt_index`.
        std_mode: ``"population" | "bessel" | "none"``.
        eps: added to the std (default 1e-6, §1).
        singleton: ``"zero" | "reward"``, the advantage of a group of one (see above).

    Returns:
        ``[B]`` advantages, dtype of ``rewards`` (float32 when rewards are bool/int).
    """
    rewards = _require_1d("rewards", rewards)
    group_ids = _as_group_ids(group_ids, rewards.shape[0])
    if std_mode not in STD_MODES:
        raise ValueError(f"unknown std_mode {std_mode!r}; expected one of {STD_MODES}")
    if singleton not in SINGLETON_ADVANTAGES:
        raise ValueError(f"unknown singleton {singleton!r}; expected one of {SINGLETON_ADVANTAGES}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    _require_finite("rewards", rewards)
    if rewards.numel() == 0:
        return torch.zeros(0, dtype=out_dtype, device=rewards.device)

    r = rewards.to(torch.float64)
    index, n_groups = _group_index(group_ids)
    counts = _segment_sum(torch.ones_like(r), index, n_groups)
    mean = _segment_sum(r, index, n_groups) / counts
    deviation = r - mean[index]  # two-pass variance: exact enough for ~1e-4 spreads around 1.0
    if std_mode == "none":
        advantages = deviation
    else:
        sum_sq = _segment_sum(deviation * deviation, index, n_groups)
        dof = counts if std_mode == "population" else (counts - 1).clamp(min=1)
        denominator = (sum_sq / dof).sqrt()[index] + eps
        # eps = 0 and a constant group: 0/0 -> advantage 0 (no signal), not NaN
        advantages = torch.where(denominator > 0, deviation / denominator.clamp(min=1e-300), 0.0)
    if singleton == "zero":
        lone = torch.zeros_like(advantages)
    else:  # verl: mean 0, std 1
        lone = r if std_mode == "none" else r / (1.0 + eps)
    advantages = torch.where(counts[index] > 1, advantages, lone)
    return advantages.to(out_dtype)


# --------------------------------------------------------------------------------------------
# §3 DSDR
# --------------------------------------------------------------------------------------------


def dsdr_shaped_rewards(
    rewards: Tensor, diversity: Tensor, *, lambda_d: float = 0.001, sigma_d: float = 1.0
) -> Tensor:
    """Correct-only bounded diversity bonus, ALGORITHMS.md §3.2 (DSDR paper, global scale).

    ``rtilde_i = r_i + lambda_d * clip(d_i, 0, sigma_d) * 1[r_i = 1]``.
    ``sigma_d`` is not given in the paper (default 1.0, i.e. the bound of ``d`` in [0, 1]).

    Args:
        rewards: ``[B]`` verifier outcome in {0, 1} (bool accepted). A non-binary value is an
            error: shaping an already shaped reward is a bug.
        diversity: ``[B]`` ``d_i`` from ``dsdr_eval.diversity.dsdr_diversity`` (§3.1); only the
            entries of correct rollouts are read, and they must be finite.
        lambda_d: bonus scale (default 0.001; 0 for the w/o GD ablation).
        sigma_d: upper clip of ``d`` (> 0).

    Returns:
        ``[B]`` shaped rewards, dtype of ``rewards`` (float64 when rewards are bool/int, because
        the bonus is ~1e-4 of the reward; prefer float64 inputs for the same reason).
    """
    correct = _binary("rewards", rewards)
    diversity = _require_float("diversity", _require_1d("diversity", diversity))
    _require_same_shape([("rewards", rewards), ("diversity", diversity)])
    if not lambda_d >= 0:
        raise ValueError(f"lambda_d must be >= 0, got {lambda_d}")
    if not sigma_d > 0:
        raise ValueError(f"sigma_d must be > 0, got {sigma_d}")
    _require_finite("diversity (of correct rollouts)", diversity[correct])
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float64
    r = correct.to(out_dtype)
    d_bar = diversity.to(out_dtype).clamp(0.0, sigma_d)
    bonus = torch.where(correct, lambda_d * d_bar, torch.zeros_like(d_bar))
    return r + bonus


def dsdr_coupling_weights(
    rewards: Tensor,
    diversity: Tensor,
    group_ids: Tensor,
    *,
    tau: float = 5.0,
    sigma_d: float = 1.0,
    uniform: bool = False,
) -> Tensor:
    """Global-to-local coupling weights, ALGORITHMS.md §3.3 (DSDR paper).

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
    correct = _binary("rewards", rewards)
    diversity = _require_float("diversity", _require_1d("diversity", diversity))
    _require_same_shape([("rewards", rewards), ("diversity", diversity)])
    group_ids = _as_group_ids(group_ids, rewards.shape[0])
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
        _require_finite("diversity (of correct rollouts)", diversity[correct])
        logits = tau * torch.where(correct, diversity, torch.zeros_like(diversity)).clamp(0.0, sigma_d)
    logits = torch.where(correct, logits, torch.full_like(logits, -math.inf))
    index, n_groups = _group_index(group_ids)
    group_max = _segment_max(logits, index, n_groups)
    # groups without a correct rollout have max -inf: shift by 0 there so exp(-inf) = 0, no NaN
    shift = torch.where(torch.isfinite(group_max), group_max, torch.zeros_like(group_max))
    unnormalised = torch.exp(logits - shift[index])  # 0 outside P
    totals = _segment_sum(unnormalised, index, n_groups)
    return torch.where(correct, unnormalised / totals[index].clamp(min=torch.finfo(totals.dtype).tiny), 0.0)


def dsdr_local_entropy_term(
    log_probs: Tensor,
    old_log_probs: Tensor,
    response_mask: Tensor,
    weights: Tensor,
    *,
    clamp: float = 20.0,
    num_groups: float | None = None,
) -> Tensor:
    """Local, length-normalised, correct-only entropy term ``J_local``, ALGORITHMS.md §3.4.

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
    ``tests/test_core_algos.py``.

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
    log_probs = _require_float("log_probs", _require_2d("log_probs", log_probs))
    old_log_probs = _require_2d("old_log_probs", old_log_probs)
    _require_same_shape([("log_probs", log_probs), ("old_log_probs", old_log_probs), ("response_mask", response_mask)])
    mask = _mask_as("response_mask", response_mask, log_probs)
    weights = _require_1d("weights", weights)
    if weights.shape[0] != log_probs.shape[0]:
        raise ValueError(f"shape mismatch: log_probs has {log_probs.shape[0]} rows but weights has {weights.shape[0]}")
    _require_finite("weights", weights)
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


@register_adv_estimator("dsdr")
def compute_dsdr_advantage(
    rewards: Tensor,
    diversity: Tensor,
    group_ids: Tensor,
    *,
    lambda_d: float = 0.001,
    sigma_d: float = 1.0,
    std_mode: str = "population",
    eps: float = 1e-6,
) -> Tensor:
    """DSDR advantage: the §1 advantage of the §3.2 shaped reward (composition, float64 inside).

    Shapes: rewards/diversity/group_ids ``[B]`` -> ``[B]`` (dtype of ``diversity``).
    """
    shaped = dsdr_shaped_rewards(rewards.to(torch.float64), diversity, lambda_d=lambda_d, sigma_d=sigma_d)
    advantages = compute_group_advantage(shaped, group_ids, std_mode=std_mode, eps=eps)
    return advantages.to(diversity.dtype)


# --------------------------------------------------------------------------------------------
# §4 DARLING
# --------------------------------------------------------------------------------------------


def darling_rewards(rewards: Tensor, div: Tensor, *, floor: float = 0.1) -> Tensor:
    """DARLING multiplicative reward, ALGORITHMS.md §4 (DARLING paper).

    ``r_darling = r * max(Div, floor)`` with ``Div(o_i) = (G - |class(o_i)|) / (G - 1)`` from
    ``dsdr_eval.diversity.darling_div`` (which already floors; flooring again is idempotent).

    Args:
        rewards: ``[B]`` verifier outcome in {0, 1} (bool accepted).
        div: ``[B]`` DARLING diversity in [0, 1] (finite).
        floor: lower bound of ``Div`` (default 0.1), in [0, 1].

    Returns:
        ``[B]`` rewards, dtype of ``div``.
    """
    correct = _binary("rewards", rewards)
    div = _require_float("div", _require_1d("div", div))
    _require_same_shape([("rewards", rewards), ("div", div)])
    _require_finite("div", div)
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor must be in [0, 1], got {floor}")
    return correct.to(div.dtype) * div.clamp(min=floor)


@register_adv_estimator("darling")
def compute_darling_advantage(
    rewards: Tensor, div: Tensor, group_ids: Tensor, *, floor: float = 0.1
) -> Tensor:
    """DARLING advantage, §4: ``r_darling - mean_g(r_darling)`` (no std). ``[B]`` -> ``[B]``."""
    return compute_group_advantage(darling_rewards(rewards, div, floor=floor), group_ids, std_mode="none")


# --------------------------------------------------------------------------------------------
# §2 DAPO
# --------------------------------------------------------------------------------------------


def dapo_overlong_penalty(
    response_lengths: Tensor, *, max_response_length: int, buffer: int | None = None, factor: float = 1.0
) -> Tensor:
    """DAPO soft overlong punishment, ALGORITHMS.md §2 (DAPO paper, Eq. 13).

    ``penalty = min(0, -(L - (L_max - buffer)) / buffer * factor)``: 0 up to ``L_max - buffer``,
    then linear down to ``-factor`` at ``L = L_max``. Lengths past ``L_max`` (cannot happen when
    generation is capped at ``L_max``) get ``-factor``, the DAPO paper's value for them.
    Added to the reward; never used for dynamic-sampling filtering.

    Args:
        response_lengths: ``[B]`` response lengths in tokens (>= 0; int or float).
        max_response_length: ``L_max`` (> 0).
        buffer: overlong buffer, in (0, L_max]; default ``L_max // 4``.
        factor: penalty factor (default 1.0, >= 0).

    Returns:
        ``[B]`` float64 penalties in [-factor, 0] (rewards stay float64, see module docstring).
    """
    lengths = _require_1d("response_lengths", response_lengths)
    if max_response_length <= 0:
        raise ValueError(f"max_response_length must be > 0, got {max_response_length}")
    if buffer is None:
        buffer = max_response_length // 4
    if not 0 < buffer <= max_response_length:
        raise ValueError(f"buffer must be in (0, max_response_length={max_response_length}], got {buffer}")
    if not factor >= 0:
        raise ValueError(f"factor must be >= 0, got {factor}")
    lengths = lengths.to(torch.float64)
    _require_finite("response_lengths", lengths)
    if bool((lengths < 0).any()):
        raise ValueError("response_lengths must be >= 0")
    exceed = lengths - (max_response_length - buffer)
    penalty = (-exceed / buffer * factor).clamp(min=-factor, max=0.0)
    return penalty


def dapo_keep_groups(accuracy: Tensor, group_ids: Tensor) -> Tensor:
    """DAPO dynamic-sampling filter, ALGORITHMS.md §2: keep the groups whose verifier accuracy has
    nonzero variance (drop all-correct and all-wrong groups; a group of one is dropped).

    Filter on the verifier's accuracy, never on a shaped reward: a non-0/1 ``accuracy`` is an error
    (in DSDR, all-correct groups differ by their bonus, which must not save them from the filter).

    Args:
        accuracy: ``[B]`` verifier outcome in {0, 1} (bool accepted).
        group_ids: ``[B]`` long.

    Returns:
        ``[B]`` bool, True for the rollouts of kept groups (whole groups are kept or dropped).
    """
    correct = _binary("accuracy", accuracy)
    group_ids = _as_group_ids(group_ids, accuracy.shape[0])
    if accuracy.numel() == 0:
        return torch.zeros(0, dtype=torch.bool, device=accuracy.device)
    index, n_groups = _group_index(group_ids)
    n_correct = _segment_sum(correct.to(torch.float64), index, n_groups)
    counts = _segment_sum(torch.ones(correct.shape[0], dtype=torch.float64, device=correct.device), index, n_groups)
    mixed = (n_correct > 0) & (n_correct < counts)
    return mixed[index]


# --------------------------------------------------------------------------------------------
# §1 Loss aggregation, clipped surrogate, KL
# --------------------------------------------------------------------------------------------


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
    """Reduce a per-token loss matrix to a scalar, ALGORITHMS.md §1 (verl's modes and formulas).

    * ``token-mean`` (DAPO): ``sum_{i,t} m*l / sum_{i,t} m``.
    * ``seq-mean-token-mean`` (the DSDR paper's GRPO Eq. 3): mean over sequences of
      ``sum_t m*l / T_i``.
    * ``seq-mean-token-sum``: mean over sequences of ``sum_t m*l``.
    * ``seq-mean-token-sum-norm`` (Dr.GRPO): ``sum_{i,t} m*l / C`` with ``C = norm_constant`` when
      given, else ``loss_mask.shape[-1]`` (the padded length, verl's choice). Dr.GRPO wants a
      constant ``C`` over training (e.g. the max response length): pass ``norm_constant``, since
      the padded length changes from batch to batch. Note verl sums (does not average) over
      sequences here; so does this function.

    Rows with no valid token (padding rows) are left out of the sequence means (verl would
    return NaN for them in ``seq-mean-token-mean``). Masked entries of ``loss_mat`` may hold
    anything, even inf/NaN: they are selected out, not multiplied by 0.

    Pieces of a batch (gradient accumulation, data parallelism): every mode is a sum over the
    rows divided by a divisor of the *whole* batch, so a piece's loss computed with the whole
    batch's divisor is its exact share, and the shares add up to the one-pass loss. Pass the
    whole batch's ``num_tokens`` (token-mean) or ``num_sequences`` (the two seq-mean modes; rows
    with at least one valid token) as verl's ``batch_num_tokens`` / ``global_batch_size`` do;
    ``seq-mean-token-sum-norm`` needs nothing more than its constant ``C``.
    :func:`agg_divisors` returns the keyword a mode needs. (DDP averages gradients over ranks:
    the caller multiplies the loss by the world size, verl's ``dp_size``.)

    Args:
        loss_mat: ``[B, T]`` per-token loss.
        loss_mask: ``[B, T]`` 0/1 (bool accepted).
        loss_agg_mode: one of :data:`LOSS_AGG_MODES`.
        norm_constant: ``C`` for ``seq-mean-token-sum-norm`` (> 0); an error for other modes.
        num_tokens: divisor of ``token-mean`` (> 0) instead of this piece's token count; an error
            for other modes.
        num_sequences: divisor of ``seq-mean-token-mean`` / ``seq-mean-token-sum`` (> 0) instead
            of this piece's number of non-empty rows; an error for other modes.

    Returns:
        scalar loss.
    """
    loss_mat = _require_float("loss_mat", _require_2d("loss_mat", loss_mat))
    _require_same_shape([("loss_mat", loss_mat), ("loss_mask", _require_2d("loss_mask", loss_mask))])
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; expected one of {LOSS_AGG_MODES}")
    for name, value, modes in (("norm_constant", norm_constant, ("seq-mean-token-sum-norm",)),
                               ("num_tokens", num_tokens, ("token-mean",)),
                               ("num_sequences", num_sequences, ("seq-mean-token-mean", "seq-mean-token-sum"))):
        if value is None:
            continue
        if loss_agg_mode not in modes:
            raise ValueError(f"{name} only applies to {' / '.join(modes)}, not {loss_agg_mode!r}")
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    mask = _mask_as("loss_mask", loss_mask, loss_mat)
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
    return token_sums.sum() / max(divisor, 1.0)


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
        ``{"num_tokens": ...}``, ``{"num_sequences": ...}`` or ``{"norm_constant": ...}``
        (counts floored at 1, so an all-empty batch gives a zero loss rather than 0/0).
    """
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; expected one of {LOSS_AGG_MODES}")
    if loss_agg_mode == "token-mean":
        return {"num_tokens": max(float(num_tokens), 1.0)}
    if loss_agg_mode == "seq-mean-token-sum-norm":
        if norm_constant is None:
            raise ValueError("seq-mean-token-sum-norm needs a norm_constant (e.g. max_response_length)")
        return {"norm_constant": float(norm_constant)}
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
    """PPO/GRPO clipped surrogate, ALGORITHMS.md §1 (GRPO; DAPO's clip-higher via the bounds).

    Per token ``rho = exp(clip(logp - logp_old, -clamp, clamp))`` and the objective
    ``min(rho * A, clip(rho, 1 - clip_ratio_low, 1 + clip_ratio_high) * A)``; the loss matrix is
    its negative, reduced by :func:`agg_loss`. (No verl dual-clip: the papers do not use it.)

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
    log_probs = _require_float("log_probs", _require_2d("log_probs", log_probs))
    old_log_probs = _require_2d("old_log_probs", old_log_probs)
    _require_same_shape([("log_probs", log_probs), ("old_log_probs", old_log_probs), ("response_mask", response_mask)])
    advantages = _require_float("advantages", _require_tensor("advantages", advantages))
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
    mask = _mask_as("response_mask", response_mask, log_probs)
    valid = mask.bool()
    advantages = advantages.detach().to(log_probs.dtype)
    _require_finite("advantages", advantages[valid])
    # padding may hold anything (-inf, NaN): neutralise it before any arithmetic (NaN-safe grads)
    zeros = torch.zeros_like(log_probs)
    log_probs = torch.where(valid, log_probs, zeros)
    old_log_probs = torch.where(valid, old_log_probs.detach().to(log_probs.dtype), zeros)
    advantages = torch.where(valid, advantages, zeros)

    log_ratio = (log_probs - old_log_probs).clamp(-clamp, clamp)
    ratio = torch.exp(log_ratio)
    surrogate = ratio * advantages
    clipped_surrogate = ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high) * advantages
    loss_mat = -torch.minimum(surrogate, clipped_surrogate)
    pg_loss = agg_loss(loss_mat, mask, loss_agg_mode, norm_constant=norm_constant, num_tokens=num_tokens,
                       num_sequences=num_sequences)

    with torch.no_grad():
        clipped = (clipped_surrogate < surrogate) & valid
        n_valid = float(valid.sum().clamp(min=1).item())
        valid_ratio = ratio[valid]
        k3 = ratio - 1.0 - log_ratio
        stats = {
            "clip/frac": float(clipped.sum().item()) / n_valid,
            "clip/frac_low": float((clipped & (advantages < 0)).sum().item()) / n_valid,
            "clip/frac_high": float((clipped & (advantages > 0)).sum().item()) / n_valid,
            "kl/approx": float(masked_mean(k3, mask).item()),
            "ratio/mean": float(valid_ratio.mean().item()) if valid_ratio.numel() else 0.0,
            "ratio/min": float(valid_ratio.min().item()) if valid_ratio.numel() else 0.0,
            "ratio/max": float(valid_ratio.max().item()) if valid_ratio.numel() else 0.0,
        }
    return pg_loss, stats


def kl_penalty_k3(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """Per-token ``low_var_kl`` (Schulman's k3) to a reference policy, ALGORITHMS.md §1 (optional).

    ``kl = logp_ref - logp``, clamped to [-20, 20]; ``k3 = exp(kl) - kl - 1`` clamped to
    [-10, 10] (verl's ``kl_penalty(..., "low_var_kl")``). Estimates KL(pi_theta || pi_ref) on
    tokens sampled from the policy; >= 0, and 0 where the two log-probs are equal.

    Args:
        log_probs: ``[B, T]`` (with grad). ref_log_probs: ``[B, T]`` (detached here).

    Returns:
        ``[B, T]``; reduce with :func:`agg_loss` and the run's ``loss_agg_mode``.
    """
    log_probs = _require_float("log_probs", _require_2d("log_probs", log_probs))
    ref_log_probs = _require_2d("ref_log_probs", ref_log_probs)
    _require_same_shape([("log_probs", log_probs), ("ref_log_probs", ref_log_probs)])
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
    logits = _require_float("logits", _require_tensor("logits", logits))
    if logits.dim() != 3:
        raise ValueError(f"logits must have shape [B, T, V], got {tuple(logits.shape)}")
    if not temperature > 0 or not math.isfinite(temperature):
        raise ValueError(f"temperature must be finite and > 0, got {temperature}")
    log_p = torch.log_softmax(logits / temperature, dim=-1)
    p_log_p = torch.where(torch.isfinite(log_p), log_p.exp() * log_p, torch.zeros_like(log_p))
    return -p_log_p.sum(dim=-1)


# --------------------------------------------------------------------------------------------
# Per-algorithm objective defaults (§1–§4)
# --------------------------------------------------------------------------------------------

_COMMON: dict[str, Any] = {
    "std_mode": "population",  # §1: DSDR states the population std; used for every std baseline
    "eps": 1e-6,  # §1
    "clip_ratio_low": 0.2,
    "clip_ratio_high": 0.2,
    "log_ratio_clamp": 20.0,  # §1
    "loss_agg_mode": "token-mean",
    "reward": "verifier",  # verifier | dsdr | darling
    "lambda_d": 0.0,
    "sigma_d": 1.0,  # §3.2: not given in the paper
    "tau": 5.0,  # §3.3
    "uniform_coupling": False,
    "local_term": False,
    "lambda_l": 0.0,
    "use_kl": False,  # §1: off by default (beta = 0)
    "kl_coef": 0.0,
    "kl_estimator": "low_var_kl",
    "dynamic_sampling": False,
    "max_num_gen_batches": 10,  # §2
    "dapo_exhausted": "train",  # §2 "give up": train on what was kept (verl: "error")
    "singleton_advantage": "zero",  # §1 silent on G = 1 (verl: "reward")
    "local_norm": "prompts",  # §3.4 per prompt; batch mean over the mini-batch's prompts
    "overlong_shaping": False,
    "overlong_buffer": None,  # None -> max_response_length // 4 (§2)
    "overlong_factor": 1.0,  # §2
    "darling_floor": 0.1,  # §4
}

ALGO_DEFAULTS: dict[str, dict[str, Any]] = {
    # §1 GRPO; seq-mean-token-mean = the DSDR paper's GRPO Eq. 3
    "grpo": {**_COMMON, "loss_agg_mode": "seq-mean-token-mean"},
    # §2 DAPO: clip-higher, token-mean, dynamic sampling, overlong shaping, no KL
    "dapo": {
        **_COMMON,
        "clip_ratio_high": 0.28,
        "loss_agg_mode": "token-mean",
        "dynamic_sampling": True,
        "overlong_shaping": True,
    },
    # §3 DSDR: J = J_GRPO(theta; rtilde) + lambda_l * J_local, clip-higher
    "dsdr": {
        **_COMMON,
        "clip_ratio_high": 0.28,
        "loss_agg_mode": "seq-mean-token-mean",
        "reward": "dsdr",
        "lambda_d": 0.001,
        "local_term": True,
        "lambda_l": 0.001,
    },
    # §3.6 w/o GD: no bonus, uniform coupling over P, local term kept
    "dsdr_wo_gd": {
        **_COMMON,
        "clip_ratio_high": 0.28,
        "loss_agg_mode": "seq-mean-token-mean",
        "reward": "dsdr",
        "lambda_d": 0.0,
        "uniform_coupling": True,
        "local_term": True,
        "lambda_l": 0.001,
    },
    # §3.6 w/o GC: bonus kept, no local term
    "dsdr_wo_gc": {
        **_COMMON,
        "clip_ratio_high": 0.28,
        "loss_agg_mode": "seq-mean-token-mean",
        "reward": "dsdr",
        "lambda_d": 0.001,
        "local_term": False,
        "lambda_l": 0.0,
    },
    # §4 DARLING: r * Div, advantage without std, token-mean, clip (0.2, 0.2), no KL/entropy bonus
    "darling": {**_COMMON, "std_mode": "none", "reward": "darling", "loss_agg_mode": "token-mean"},
}

ALGO_NOTES: dict[str, dict[str, str]] = {
    "grpo": {
        "std_mode": "paper silent for the GRPO baseline; population as DSDR states, for comparability "
        "(verl's GRPO uses torch.std = bessel)",
        "loss_agg_mode": "the DSDR paper's GRPO objective (Eq. 3) averages tokens per sequence, then sequences",
    },
    "dapo": {
        "std_mode": "DAPO does not say population vs bessel; population for comparability",
        "overlong_buffer": "DAPO's recipe value depends on L_max; ALGORITHMS §2 default L_max // 4",
    },
    "dsdr": {
        "loss_agg_mode": "paper silent at code level; J_GRPO in the objective is Eq. 3 (seq-mean-token-mean), "
        "and J_local is length-normalised per sequence the same way. token-mean (verl's default, "
        "DAPO lineage) is the alternative if the authors kept verl's default",
        "sigma_d": "not given in the paper; 1.0 = the upper bound of d, i.e. no clipping",
        "dynamic_sampling": "not stated for DSDR; off: it would drop the all-correct groups, exactly the "
        "ones where the bonus is the only signal",
        "overlong_shaping": "not stated for DSDR; off",
        "lambda_l": "J_local is per prompt (§3.4); the trainer divides the batch sum by the number of "
        "prompts (num_groups) so lambda_l is per prompt like J_GRPO",
    },
    "dsdr_wo_gd": {"uniform_coupling": "§3.6: coupling weights uniform over the correct rollouts"},
    "dsdr_wo_gc": {"local_term": "§3.6: no local term (lambda_l = 0)"},
    "darling": {
        "eps": "unused: no std normalisation",
        "darling_floor": "§4: Div floored at 0.1",
    },
}


# Choices the papers leave open that apply to every algorithm (recorded with every run).
COMMON_NOTES: dict[str, str] = {
    "singleton_advantage": "a group of one rollout: the papers are silent; zero = no signal without a "
    "comparison (default), reward = verl's mean 0 / std 1, i.e. A = r / (1 + eps)",
    "dapo_exhausted": "§2 says only 'give up after max_num_gen_batches'; train = update on the groups kept so "
    "far (when none was kept: on the last generation batch as is, whose accuracy advantages are all 0), "
    "error = stop the run with an error as verl's DAPO trainer does",
    "local_norm": "§3.4 defines J_local per prompt (no 1/G); prompts = mean over the mini-batch's prompts like "
    "J_GRPO (default), correct_prompts = mean over the prompts that have a correct rollout, none = plain sum",
}


@dataclasses.dataclass(frozen=True)
class ObjectiveConfig:
    """The objective settings of one run (see :data:`ALGO_DEFAULTS`); validated on construction."""

    algo: str
    std_mode: str
    eps: float
    clip_ratio_low: float
    clip_ratio_high: float
    log_ratio_clamp: float
    loss_agg_mode: str
    reward: str
    lambda_d: float
    sigma_d: float
    tau: float
    uniform_coupling: bool
    local_term: bool
    lambda_l: float
    use_kl: bool
    kl_coef: float
    kl_estimator: str
    dynamic_sampling: bool
    max_num_gen_batches: int
    dapo_exhausted: str
    singleton_advantage: str
    local_norm: str
    overlong_shaping: bool
    overlong_buffer: int | None
    overlong_factor: float
    darling_floor: float

    def __post_init__(self) -> None:
        if self.std_mode not in STD_MODES:
            raise ValueError(f"std_mode: unknown {self.std_mode!r}; expected one of {STD_MODES}")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(f"loss_agg_mode: unknown {self.loss_agg_mode!r}; expected one of {LOSS_AGG_MODES}")
        if self.reward not in REWARD_KINDS:
            raise ValueError(f"reward: unknown {self.reward!r}; expected one of {REWARD_KINDS}")
        for name, allowed in (("dapo_exhausted", DAPO_EXHAUSTED), ("singleton_advantage", SINGLETON_ADVANTAGES),
                              ("local_norm", LOCAL_NORMS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: unknown {getattr(self, name)!r}; expected one of {allowed}")
        if self.kl_estimator != "low_var_kl":
            raise ValueError(f"kl_estimator: only 'low_var_kl' is implemented, got {self.kl_estimator!r}")
        for name in ("eps", "lambda_d", "tau", "lambda_l", "kl_coef", "overlong_factor"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.clip_ratio_low < 1 or not self.clip_ratio_high >= 0:
            raise ValueError(f"clip ratios out of range: ({self.clip_ratio_low}, {self.clip_ratio_high})")
        if not self.sigma_d > 0 or not self.log_ratio_clamp > 0:
            raise ValueError("sigma_d and log_ratio_clamp must be > 0")
        if not 0 <= self.darling_floor <= 1:
            raise ValueError(f"darling_floor must be in [0, 1], got {self.darling_floor}")
        if self.max_num_gen_batches < 1:
            raise ValueError(f"max_num_gen_batches must be >= 1, got {self.max_num_gen_batches}")
        if self.overlong_buffer is not None and self.overlong_buffer <= 0:
            raise ValueError(f"overlong_buffer must be > 0 or None, got {self.overlong_buffer}")
        if not self.local_term and self.lambda_l != 0:
            raise ValueError("lambda_l is ignored when local_term is off: set lambda_l = 0 (or local_term = True)")
        if self.use_kl != (self.kl_coef > 0):
            raise ValueError(f"use_kl={self.use_kl} disagrees with kl_coef={self.kl_coef}: set both")
        if self.lambda_d > 0 and self.reward != "dsdr":
            raise ValueError(f"lambda_d > 0 needs reward='dsdr', got reward={self.reward!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def objective_config(algo: str, **overrides: Any) -> ObjectiveConfig:
    """:class:`ObjectiveConfig` for ``algo`` from :data:`ALGO_DEFAULTS`, with ``overrides``
    (an unknown key is an error naming the valid ones)."""
    if algo not in ALGO_DEFAULTS:
        raise ValueError(f"unknown algo {algo!r}; expected one of {sorted(ALGO_DEFAULTS)}")
    settings = dict(ALGO_DEFAULTS[algo])
    unknown = sorted(set(overrides) - set(settings))
    if unknown:
        raise ValueError(f"unknown objective setting(s) {unknown}; valid: {sorted(settings)}")
    settings.update(overrides)
    return ObjectiveConfig(algo=algo, **settings)
