"""Input validation (clear ValueErrors naming the argument) and per-group segment reductions,
shared by every module of :mod:`dsdr_train.core_algos`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor


def require_tensor(name: str, x: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def require_1d(name: str, x: Any) -> Tensor:
    x = require_tensor(name, x)
    if x.dim() != 1:
        raise ValueError(f"{name} must have shape [B], got {tuple(x.shape)}")
    return x


def require_2d(name: str, x: Any) -> Tensor:
    x = require_tensor(name, x)
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape [B, T], got {tuple(x.shape)}")
    return x


def require_same_shape(names_and_tensors: Sequence[tuple[str, Tensor]]) -> None:
    first_name, first = names_and_tensors[0]
    for name, x in names_and_tensors[1:]:
        if x.shape != first.shape:
            raise ValueError(
                f"shape mismatch: {first_name} has shape {tuple(first.shape)} but {name} has {tuple(x.shape)}"
            )


def require_float(name: str, x: Tensor) -> Tensor:
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def require_finite(name: str, x: Tensor) -> None:
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        bad = int(torch.nonzero(~torch.isfinite(x))[0][0])
        raise ValueError(f"{name} has a non-finite value ({x.reshape(-1)[bad].item()}) at flat index {bad}")


def as_group_ids(group_ids: Any, batch: int) -> Tensor:
    group_ids = require_1d("group_ids", group_ids)
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool or group_ids.is_complex():
        raise ValueError(f"group_ids must be an integer tensor (torch.long), got dtype {group_ids.dtype}")
    if group_ids.shape[0] != batch:
        raise ValueError(f"shape mismatch: rewards has {batch} rollouts but group_ids has {group_ids.shape[0]}")
    return group_ids.long()


def binary(name: str, x: Any) -> Tensor:
    """A 0/1 verifier outcome as a bool tensor; anything else (e.g. a shaped reward) is an error."""
    x = require_1d(name, x)
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


def mask_as(name: str, mask: Tensor, like: Tensor) -> Tensor:
    mask = require_2d(name, mask)
    if mask.dtype != torch.bool and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{name} must contain only 0/1 (or be bool)")
    return mask.to(like.dtype)


def group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Dense group index in [0, n_groups) per rollout, and n_groups. Ids need not be contiguous."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    return inverse, n_groups


def segment_sum(values: Tensor, index: Tensor, n_groups: int) -> Tensor:
    return torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, index, values)


def segment_max(values: Tensor, index: Tensor, n_groups: int) -> Tensor:
    out = torch.full((n_groups,), -math.inf, dtype=values.dtype, device=values.device)
    return out.scatter_reduce(0, index, values, reduce="amax", include_self=True)
