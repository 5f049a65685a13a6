"""verl advantage estimators ``dsdr``, ``dsdr_wo_gd``, ``dsdr_wo_gc``, ``darling``, ``grpo_pop_std``, ``dapo``.

Registered in verl's ``ADV_ESTIMATOR_REGISTRY`` (``register_adv_est``) when verl loads the plugin,
so ``algorithm.adv_estimator=dsdr`` dispatches here from verl's own ``compute_advantage``. Each is
the group advantage of docs/ALGORITHMS.md §1, Eq. 1 (population std) / §4, Eq. 17 (no std, DARLING)
computed by :func:`dsdr_train.core_algos.get_adv_estimator_fn` with the algorithm's settings, on
``token_level_rewards.sum(-1)`` grouped by ``index`` (verl's ``uid``).

For every name the per-rollout reward must already be the spec's one: the {0, 1} verdict (plus
Eq. 6 for DAPO), the DSDR bonus (Eq. 11) or DARLING's r * Div (Eq. 16). Only the plugin's trainer
(``trainer.v1.trainer_mode=dsdr_sync``) sees whole uid groups of decoded responses, computes it
(:mod:`.group_rewards`) and marks the algorithm config with :data:`REWARDS_SHAPED_KEY`; these
estimators refuse a batch without that mark, instead of silently training on verl's raw score
(``math_dapo``'s +-1, which moves DAPO's advantages once the overlong term is added).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor
from verl.trainer.ppo.core_algos import register_adv_est

from dsdr_train.core_algos import get_adv_estimator_fn, group_ids_from_prompt_index
from dsdr_train.integrations.verl.settings import ESTIMATOR_ALGOS, plugin_settings

# Set in the algorithm config by the plugin's trainer: the largest reward its shaping can give
# (1 + lambda_d * sigma_d for DSDR, Eq. 11; 1 for DARLING, Eq. 16, and the verifier).
REWARDS_SHAPED_KEY = "dsdr_rewards_shaped_max"
# ... and the smallest one: 0, or -overlong_factor when the overlong term of Eq. 6 is added
REWARDS_FLOOR_KEY = "dsdr_rewards_shaped_min"


def shaped_reward_bound(config: Any, key: str = REWARDS_SHAPED_KEY) -> float | None:
    """The trainer's mark ``key`` in the algorithm config (None when the rewards were not shaped by it)."""
    if config is None:
        return None
    getter = getattr(config, "get", None)
    value = getter(key, None) if callable(getter) else getattr(config, key, None)
    return None if value is None else float(value)


def _check_shaped_range(name: str, rewards: Tensor, bound: float, reward: str, penalty: float) -> None:
    """The rewards can be what the shaping produces, plus an overlong term in [-penalty, 0] (Eq. 6):
    verifier {0, 1}, DSDR {0} u [1, bound] (Eq. 11), DARLING [0, bound] (Eq. 16). Catches verl's +-1
    math_dapo score reaching the estimator unmapped."""
    tol = 1e-12
    if penalty > 0:  # a penalised reward is anywhere in [-penalty, bound]
        ok = (rewards >= -penalty - tol) & (rewards <= bound + tol)
    elif reward == "dsdr":
        ok = (rewards == 0) | ((rewards >= 1) & (rewards <= bound + tol))
    elif reward == "verifier":
        ok = (rewards == 0) | (rewards == 1)
    else:
        ok = (rewards >= 0) & (rewards <= bound + tol)
    if not bool(ok.all()):
        bad = float(rewards[~ok][0])
        raise ValueError(f"adv_estimator={name}: per-rollout reward {bad} is not a {reward}-shaped reward; "
                         "the rewards must come from the plugin's trainer (trainer.v1.trainer_mode=dsdr_sync)")


def group_advantage(name: str, token_level_rewards: Tensor, response_mask: Tensor, index: np.ndarray,
                    config: Any = None) -> tuple[Tensor, Tensor]:
    """``(advantages, returns)``, both ``[B, T]`` float32: the estimator ``name``'s per-rollout
    advantage (float64 statistics) on every response token."""
    settings = plugin_settings(name, None)
    objective = settings.objective
    rewards = token_level_rewards.to(torch.float64).sum(dim=-1)
    bound = shaped_reward_bound(config)
    if bound is None:
        raise ValueError(f"adv_estimator={name} needs the spec's rewards written by the plugin's trainer: "
                         "run with trainer.v1.trainer_mode=dsdr_sync (see docs/training.md, 'The verl plugin')")
    floor = shaped_reward_bound(config, REWARDS_FLOOR_KEY) or 0.0
    _check_shaped_range(name, rewards, bound, objective.reward, -floor)
    group_ids = group_ids_from_prompt_index(list(index))
    advantages = get_adv_estimator_fn(objective.adv_estimator)(
        rewards, group_ids, std_mode=objective.std_mode, eps=objective.eps, singleton=objective.singleton_advantage)
    # float32 like verl's own estimators (the statistics above are float64; the plugin's trainer
    # passes float64 rewards, which would otherwise make the whole actor loss float64)
    out = (advantages.unsqueeze(-1) * response_mask.to(torch.float64)).to(torch.float32)
    return out, out


def _register(name: str) -> None:
    def estimator(token_level_rewards: Tensor, response_mask: Tensor, index: np.ndarray, config: Any = None,
                  **_: Any) -> tuple[Tensor, Tensor]:
        return group_advantage(name, token_level_rewards, response_mask, index, config)

    estimator.__name__ = f"compute_{name}_advantage"
    estimator.__doc__ = f"verl estimator {name!r}: :func:`group_advantage` with the {ESTIMATOR_ALGOS[name]} settings."
    register_adv_est(name)(estimator)


for _name in ESTIMATOR_ALGOS:
    _register(_name)
