"""Group ids and group-relative advantages (docs/ALGORITHMS.md §1, §2 filter, §4).

Shapes: ``B`` = rollouts in the batch, all groups concatenated in any order. Statistics are
computed in float64: in an all-correct DSDR group the rewards differ only by ``lambda_d * d``
(~1e-4), which float32 would round away.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from dsdr_train.core_algos._checks import (as_group_ids, binary, group_index, require_1d, require_finite,
                                           segment_sum)
from dsdr_train.core_algos.registry import register_adv_estimator
from dsdr_train.objective import SINGLETON_ADVANTAGES, STD_MODES


def group_ids_from_prompt_index(
    prompt_index: Tensor | Sequence[Hashable], *, expected_group_size: int | None = None
) -> Tensor:
    """Dense group ids (docs/ALGORITHMS.md §1, "Group ids": every rollout of one prompt shares one group id, no other rollout does).

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


@register_adv_estimator("grpo")
def compute_group_advantage(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    std_mode: str = "population",
    eps: float = 1e-6,
    singleton: str = "zero",
) -> Tensor:
    """Group-relative advantage, docs/ALGORITHMS.md §1, Eq. 1 (and §4, Eq. 17 with ``std_mode="none"``).

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
    rewards = require_1d("rewards", rewards)
    group_ids = as_group_ids(group_ids, rewards.shape[0])
    if std_mode not in STD_MODES:
        raise ValueError(f"unknown std_mode {std_mode!r}; expected one of {STD_MODES}")
    if singleton not in SINGLETON_ADVANTAGES:
        raise ValueError(f"unknown singleton {singleton!r}; expected one of {SINGLETON_ADVANTAGES}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    require_finite("rewards", rewards)
    if rewards.numel() == 0:
        return torch.zeros(0, dtype=out_dtype, device=rewards.device)

    r = rewards.to(torch.float64)
    index, n_groups = group_index(group_ids)
    counts = segment_sum(torch.ones_like(r), index, n_groups)
    mean = segment_sum(r, index, n_groups) / counts
    deviation = r - mean[index]  # two-pass variance: exact enough for ~1e-4 spreads around 1.0
    if std_mode == "none":
        advantages = deviation
    else:
        sum_sq = segment_sum(deviation * deviation, index, n_groups)
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


def dapo_keep_groups(accuracy: Tensor, group_ids: Tensor) -> Tensor:
    """DAPO dynamic-sampling filter, docs/ALGORITHMS.md §2 (dynamic sampling): keep the groups whose verifier accuracy has
    nonzero variance (drop all-correct and all-wrong groups; a group of one is dropped).

    Filter on the verifier's accuracy, never on a shaped reward: a non-0/1 ``accuracy`` is an error
    (in DSDR, all-correct groups differ by their bonus, which must not save them from the filter).

    Args:
        accuracy: ``[B]`` verifier outcome in {0, 1} (bool accepted).
        group_ids: ``[B]`` long.

    Returns:
        ``[B]`` bool, True for the rollouts of kept groups (whole groups are kept or dropped).
    """
    correct = binary("accuracy", accuracy)
    group_ids = as_group_ids(group_ids, accuracy.shape[0])
    if accuracy.numel() == 0:
        return torch.zeros(0, dtype=torch.bool, device=accuracy.device)
    index, n_groups = group_index(group_ids)
    n_correct = segment_sum(correct.to(torch.float64), index, n_groups)
    counts = segment_sum(torch.ones(correct.shape[0], dtype=torch.float64, device=correct.device), index, n_groups)
    mixed = (n_correct > 0) & (n_correct < counts)
    return mixed[index]
