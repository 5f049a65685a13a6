"""`algorithm.adv_estimator=<name>` through verl's own compute_advantage on a hand-built DataProto
gives core_algos' advantages for the same rewards and uid groups."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

from dsdr_train.core_algos import RolloutSignals, group_ids_from_prompt_index, objective_config, shape_rewards
from dsdr_train.integrations.verl.estimators import REWARDS_FLOOR_KEY, REWARDS_SHAPED_KEY

# two prompts, four rollouts each, interleaved, with verl's string uids
UIDS = ["u-a", "u-b", "u-a", "u-b", "u-b", "u-a", "u-a", "u-b"]
ACCURACY = [1, 1, 0, 1, 1, 1, 1, 1]  # group u-b all correct: only the bonus separates its rollouts
DIVERSITY = [0.31, 0.12, 0.9, 0.47, 0.05, 0.66, 0.2, 0.83]
DARLING_DIV = [0.1, 1 / 3, 2 / 3, 1.0, 1 / 3, 0.1, 1.0, 2 / 3]
LENGTHS = [5, 3, 6, 2, 6, 4, 1, 6]
T = 6


def _signals() -> RolloutSignals:
    return RolloutSignals(accuracy=torch.tensor(ACCURACY, dtype=torch.float64),
                          group_ids=group_ids_from_prompt_index(UIDS), response_lengths=torch.tensor(LENGTHS),
                          max_response_length=T, diversity=torch.tensor(DIVERSITY, dtype=torch.float64),
                          darling_div=torch.tensor(DARLING_DIV, dtype=torch.float64))


def _data(rewards: torch.Tensor) -> DataProto:
    mask = (torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]).to(torch.float32)
    token_rewards = torch.zeros(len(UIDS), T, dtype=torch.float64)
    token_rewards[torch.arange(len(UIDS)), torch.tensor(LENGTHS) - 1] = rewards
    return DataProto.from_dict(tensors={"token_level_rewards": token_rewards, "response_mask": mask},
                               non_tensors={"uid": np.array(UIDS, dtype=object)})


def _marked(bound: float) -> object:
    return OmegaConf.create({"adv_estimator": "x", REWARDS_SHAPED_KEY: bound})


@pytest.mark.parametrize("name", ["dsdr", "dsdr_wo_gd", "dsdr_wo_gc", "darling"])
def test_verl_dispatch_equals_core_algos(name):
    objective = objective_config(name)
    expected = shape_rewards(_signals(), objective)
    bound = 1 + objective.lambda_d * objective.sigma_d if objective.reward == "dsdr" else 1.0
    data = compute_advantage(_data(expected.shaped), adv_estimator=name, config=_marked(bound))
    mask = data.batch["response_mask"].bool()
    advantages = data.batch["advantages"]
    for i in range(len(UIDS)):
        assert torch.allclose(advantages[i][mask[i]].to(torch.float64),
                              expected.advantages[i].expand(int(mask[i].sum())), rtol=0, atol=1e-6), (name, i)
        assert bool((advantages[i][~mask[i]] == 0).all())
    assert torch.equal(data.batch["returns"], advantages) and advantages.dtype == torch.float32
    if name != "darling":  # the all-correct group keeps a nonzero, bonus-driven signal under DSDR
        b_rows = [i for i, u in enumerate(UIDS) if u == "u-b"]
        assert (advantages[b_rows].abs().sum() > 0) == (objective.lambda_d > 0)


def test_grpo_pop_std_is_the_population_std_and_verl_grpo_is_not():
    rewards = torch.tensor(ACCURACY, dtype=torch.float64)
    rewards[0] = 0.0
    ours = compute_advantage(_data(rewards), adv_estimator="grpo_pop_std", config=_marked(1.0))
    verl_grpo = compute_advantage(_data(rewards), adv_estimator="grpo", config=OmegaConf.create({}))
    signals = RolloutSignals(accuracy=rewards, group_ids=group_ids_from_prompt_index(UIDS),
                             response_lengths=torch.tensor(LENGTHS), max_response_length=T)
    expected = shape_rewards(signals, objective_config("grpo")).advantages
    last = torch.tensor(LENGTHS) - 1
    rows = torch.arange(len(UIDS))
    assert torch.allclose(ours.batch["advantages"][rows, last].to(torch.float64), expected, atol=1e-6, rtol=0)
    # Bessel vs population: the ratio of the two is sqrt((G-1)/G) in a mixed group of G = 4
    a = [i for i, u in enumerate(UIDS) if u == "u-a"]
    ratio = verl_grpo.batch["advantages"][a, last[a]] / ours.batch["advantages"][a, last[a]]
    assert torch.allclose(ratio.to(torch.float64), torch.full((4,), (3 / 4) ** 0.5, dtype=torch.float64), atol=1e-5)


def test_a_shaping_estimator_refuses_rewards_the_plugin_trainer_did_not_shape():
    shaped = shape_rewards(_signals(), objective_config("dsdr")).shaped
    with pytest.raises(ValueError, match="trainer_mode=dsdr_sync"):
        compute_advantage(_data(shaped), adv_estimator="dsdr", config=OmegaConf.create({}))
    plus_minus_one = torch.tensor([1.0 if a else -1.0 for a in ACCURACY], dtype=torch.float64)  # verl math_dapo
    with pytest.raises(ValueError, match="not a dsdr-shaped reward"):
        compute_advantage(_data(plus_minus_one), adv_estimator="dsdr", config=_marked(1.001))
    with pytest.raises(ValueError, match="not a darling-shaped reward"):
        compute_advantage(_data(plus_minus_one), adv_estimator="darling", config=_marked(1.0))


def test_every_plugin_estimator_refuses_verl_raw_scores():
    """verl's math_dapo +-1 score (GRPO, DAPO too): the spec's reward is the {0, 1} verdict (§1), plus
    Eq. 6's overlong term for DAPO, written by the plugin's trainer."""
    plus_minus_one = torch.tensor([1.0 if a else -1.0 for a in ACCURACY], dtype=torch.float64)
    for name in ("grpo_pop_std", "dapo"):
        with pytest.raises(ValueError, match="trainer_mode=dsdr_sync"):
            compute_advantage(_data(plus_minus_one), adv_estimator=name, config=OmegaConf.create({}))
    with pytest.raises(ValueError, match="not a verifier-shaped reward"):
        compute_advantage(_data(plus_minus_one), adv_estimator="grpo_pop_std", config=_marked(1.0))


def test_dapo_advantages_are_the_specs_on_0_1_rewards_with_the_overlong_term():
    """Defect 2's case: a group of 2 correct / 2 wrong, one of each overlong (penalty -0.6):
    {0, 1} + penalty gives [1.4, 0.2, -0.2, -1.4]-like spec advantages, not verl's +-1 ones."""
    uids = ["g"] * 4
    rewards = torch.tensor([1.0, 1.0 - 0.6, 0.0, -0.6], dtype=torch.float64)
    mask = torch.ones(4, 1)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards[:, None].clone(), "response_mask": mask},
                               non_tensors={"uid": np.array(uids, dtype=object)})
    marks = OmegaConf.create({"adv_estimator": "dapo", REWARDS_SHAPED_KEY: 1.0, REWARDS_FLOOR_KEY: -1.0})
    ours = compute_advantage(data, adv_estimator="dapo", config=marks).batch["advantages"][:, 0].to(torch.float64)
    centred = rewards - rewards.mean()
    expected = centred / (centred.pow(2).mean().sqrt() + 1e-6)  # Eq. 1, population std
    assert torch.allclose(ours, expected, atol=1e-6)
    verl_like = torch.tensor([1.0, 0.4, -1.0, -1.6], dtype=torch.float64)  # math_dapo +-1 + the same penalty
    c = verl_like - verl_like.mean()
    assert not torch.allclose(ours, c / (c.pow(2).mean().sqrt() + 1e-6), atol=1e-2)
