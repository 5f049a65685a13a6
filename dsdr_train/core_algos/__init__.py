"""The RL objective of GRPO, DAPO, DSDR (and its ablations) and DARLING as pure torch functions.

Equation numbers refer to ``docs/ALGORITHMS.md``, which assembles the DSDR paper (arXiv
2602.19895) and the DARLING paper (arXiv 2509.02534); DAPO is arXiv 2503.14476.

Modelled on verl's ``verl/trainer/ppo/core_algos.py``: reward shapings, advantage estimators and
policy losses sit in name registries with one signature each (:mod:`.registry`), dispatched once,
by the names the run's :class:`ObjectiveConfig` records (:mod:`.pipeline`); the loss matrix is
reduced by ``agg_loss`` with verl's mode names, so the numbers stay comparable with verl's.

Where each piece lives:

* :mod:`.advantages` -- group ids, the group advantage (Eq. 1, Eq. 17), DAPO's group filter (§2);
* :mod:`.rewards`    -- DSDR's bonus (Eq. 10-11), DARLING's reward (Eq. 16), the overlong term
  (Eq. 6), the coupling weights (Eq. 12), and the registered reward shapings;
* :mod:`.losses`     -- the clipped surrogate (Eq. 2-3), aggregation (Eq. 4a-4d), k3 KL (Eq. 5),
  the local entropy term (Eq. 13), the entropy metric;
* :mod:`.pipeline`   -- the dispatch sites (``shape_rewards``, ``policy_loss``);
* :mod:`dsdr_train.objective` -- ``ObjectiveConfig`` and each algorithm's defaults (torch-free).

Shapes: ``B`` = rollouts in the (micro-)batch (all groups concatenated, any order), ``T`` =
padded response length, ``V`` = vocabulary size.
"""

from __future__ import annotations

from dsdr_train.core_algos.advantages import compute_group_advantage, dapo_keep_groups, group_ids_from_prompt_index
from dsdr_train.core_algos.losses import (agg_divisors, agg_loss, compute_policy_loss, dsdr_local_entropy_term,
                                          kl_penalty_k3, token_entropy_from_logits)
from dsdr_train.core_algos.pipeline import ShapedRewards, check_registered, policy_loss, shape_rewards
from dsdr_train.core_algos.registry import (ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY, REWARD_SHAPING_REGISTRY,
                                            get_adv_estimator_fn, get_policy_loss_fn, get_reward_shaping_fn,
                                            register_adv_estimator, register_policy_loss, register_reward_shaping)
from dsdr_train.core_algos.rewards import (dapo_overlong_penalty, darling_reward, darling_rewards,
                                           dsdr_coupling_weights, dsdr_reward, dsdr_shaped_rewards,
                                           verifier_reward)
from dsdr_train.core_algos.types import RolloutSignals
from dsdr_train.objective import (ALGO_DEFAULTS, ALGO_NOTES, COMMON_NOTES, DAPO_EXHAUSTED, LOCAL_NORMS,
                                  LOSS_AGG_MODES, REWARD_KINDS, SINGLETON_ADVANTAGES, STD_MODES, ObjectiveConfig,
                                  objective_config)

__all__ = [
    "ADV_ESTIMATOR_REGISTRY", "ALGO_DEFAULTS", "ALGO_NOTES", "COMMON_NOTES", "DAPO_EXHAUSTED", "LOCAL_NORMS",
    "LOSS_AGG_MODES", "POLICY_LOSS_REGISTRY", "REWARD_KINDS", "REWARD_SHAPING_REGISTRY", "SINGLETON_ADVANTAGES",
    "STD_MODES", "ObjectiveConfig", "RolloutSignals", "ShapedRewards", "agg_divisors", "agg_loss", "check_registered",
    "compute_group_advantage", "compute_policy_loss", "dapo_keep_groups", "dapo_overlong_penalty", "darling_reward",
    "darling_rewards", "dsdr_coupling_weights", "dsdr_local_entropy_term", "dsdr_reward", "dsdr_shaped_rewards",
    "get_adv_estimator_fn", "get_policy_loss_fn", "get_reward_shaping_fn", "group_ids_from_prompt_index",
    "kl_penalty_k3", "objective_config", "policy_loss", "register_adv_estimator",
    "register_policy_loss", "register_reward_shaping", "shape_rewards", "token_entropy_from_logits",
    "verifier_reward",
]
