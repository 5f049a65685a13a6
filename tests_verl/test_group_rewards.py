"""The uid-group reward of the plugin equals the compact trainer's on the same responses: the same
diversity (dsdr_train.scoring on contiguous integer groups, as dsdr_train.collect builds them), the
same bonus and coupling weights (core_algos), whatever the order and type of verl's uids."""

from __future__ import annotations

import pytest
import torch

from dsdr_eval.diversity_metrics import load_encoder
from dsdr_eval.grading import extract_rows
from dsdr_eval.diversity_metrics.partition_methods import make_equivalence
from dsdr_train import scoring
from dsdr_train.config import TrainConfig
from dsdr_train.core_algos import dsdr_coupling_weights, dsdr_shaped_rewards, objective_config
from dsdr_train.integrations.verl.group_rewards import group_rewards, token_rows, verifier_accuracy
from dsdr_train.integrations.verl.settings import PluginConfigError, plugin_settings
from dsdr_train.rollout import RolloutBatch

A = ["We have $x^2 = 4$, so $x = 2$. \\boxed{2}", "Since \\(2 + 2 = 4\\) the answer is \\boxed{4}",
     "Try $x = 2$: $2^2 = 4$. \\boxed{2}", "The roots of $x^2 - 4 = 0$ are $\\pm 2$; positive: \\boxed{2}"]
B = ["Adding, $3 \\cdot 5 = 15$. \\boxed{15}", "Fifteen, since five threes make 15. \\boxed{15}",
     "$5 + 5 + 5 = 15$ \\boxed{15}", "I think \\boxed{16}"]
ORDER = [("p-a", 0), ("p-b", 0), ("p-b", 1), ("p-a", 1), ("p-a", 2), ("p-b", 2), ("p-b", 3), ("p-a", 3)]
ACC_A, ACC_B = [1, 0, 1, 1], [1, 1, 1, 0]


@pytest.fixture(scope="module")
def encoder():
    return load_encoder(None)


def _verl_batch():
    texts = [(A if uid == "p-a" else B)[k] for uid, k in ORDER]
    accuracy = torch.tensor([(ACC_A if uid == "p-a" else ACC_B)[k] for uid, k in ORDER], dtype=torch.float64)
    return texts, [uid for uid, _ in ORDER], accuracy


def _compact_rows():
    """Index of each verl row in the compact trainer's contiguous layout [p-a 0..3, p-b 0..3]."""
    return [(0 if uid == "p-a" else 4) + k for uid, k in ORDER]


@pytest.mark.parametrize("estimator", ["dsdr", "dsdr_wo_gd"])
def test_dsdr_bonus_and_weights_equal_the_compact_trainer(encoder, estimator):
    texts, uids, accuracy = _verl_batch()
    settings = plugin_settings(estimator, {"lambda_d": 0.05} if estimator == "dsdr" else None)
    ours = group_rewards(texts, uids, accuracy, torch.full((8,), 10), 4096, settings, encoder=encoder)

    compact = RolloutBatch(texts=A + B, group_ids=[0] * 4 + [1] * 4)
    graded = extract_rows({"completion": text} for text in A + B)  # where each solution ends, as the plugin reads it
    d = torch.tensor(scoring.group_diversity(compact, graded, encoder, "extended")[2], dtype=torch.float64)
    r = torch.tensor(ACC_A + ACC_B, dtype=torch.float64)
    objective = settings.objective
    bonus = dsdr_shaped_rewards(r, d, lambda_d=objective.lambda_d, sigma_d=objective.sigma_d)
    weights = dsdr_coupling_weights(r, d, torch.tensor([0] * 4 + [1] * 4), tau=objective.tau,
                                    uniform=objective.uniform_coupling)
    rows = _compact_rows()
    assert torch.allclose(torch.tensor(ours.diversity), d[rows], atol=1e-12, rtol=0)
    assert torch.allclose(ours.shaped.shaped, bonus[rows], atol=1e-12, rtol=0)
    assert torch.allclose(ours.shaped.weights, weights[rows], atol=1e-12, rtol=0)
    assert (ours.shaped.shaped > accuracy).any() == (objective.lambda_d > 0)  # the bonus is there


def test_darling_reward_equals_the_compact_trainer(encoder):
    texts, uids, accuracy = _verl_batch()
    settings = plugin_settings("darling", {"darling_threshold": 0.8})
    equivalence = make_equivalence("embedding", encoder=encoder, threshold=0.8)
    ours = group_rewards(texts, uids, accuracy, torch.full((8,), 10), 4096, settings, encoder=encoder,
                         equivalence=equivalence)
    cfg = TrainConfig(objective=objective_config("darling"))
    compact = RolloutBatch(texts=A + B, group_ids=[0] * 4 + [1] * 4)
    div = scoring.darling_diversity(compact, extract_rows({"completion": text} for text in A + B), equivalence, cfg)
    r = torch.tensor(ACC_A + ACC_B, dtype=torch.float64)
    expected = r * torch.tensor(div).clamp(min=0.1)
    assert torch.allclose(ours.shaped.shaped, expected[_compact_rows()], atol=1e-12, rtol=0)


def test_verifier_accuracy_maps_verl_scores_to_zero_one():
    # math_dapo: +1 / -1 (here -1 + an overlong penalty on the last) with the verdict in acc
    scores = torch.tensor([1.0, -1.0, 1.0, -1.5])
    assert verifier_accuracy(scores).tolist() == [1.0, 0.0, 1.0, 0.0]
    assert verifier_accuracy(torch.tensor([1.0, 0.0])).tolist() == [1.0, 0.0]  # 1/0 scorers
    # acc wins where given: a correct answer whose score an overlong penalty took to 0
    assert verifier_accuracy(torch.tensor([0.0, 1.0, -1.0]), [True, None, False]).tolist() == [1.0, 1.0, 0.0]


def test_token_rows_put_the_reward_on_the_last_valid_token():
    masks = [torch.tensor([1, 1, 1, 0]), torch.tensor([1, 0]), torch.tensor([0, 0])]
    scores, weights = token_rows(masks, torch.tensor([1.0001, 0.0, 1.0], dtype=torch.float64),
                                 torch.tensor([0.25, 0.0, 0.5]))
    assert scores[0].tolist() == [0.0, 0.0, 1.0001, 0.0] and scores[0].dtype == torch.float64
    assert scores[1].tolist() == [0.0, 0.0] and scores[2].tolist() == [0.0, 0.0]
    assert weights[0].tolist() == [0.25] * 4 and weights[2].tolist() == [0.5, 0.5]


@pytest.mark.parametrize(("estimator", "block", "match"), [
    ("grpo", None, "not a dsdr estimator"),
    ("dsdr", {"lamda_d": 0.1}, "dsdr.lamda_d"),
    ("dsdr_wo_gc", {"lambda_l": 0.01}, "no local term"),
    ("dsdr", {"local_norm": "correct_prompts"}, "dsdr.local_norm"),
    ("darling", {"darling_partition": "answer-formula"}, "answer classes"),
    ("dsdr", {"tau": -1}, "tau"),
])
def test_bad_settings_name_the_key(estimator, block, match):
    with pytest.raises(PluginConfigError, match=match):
        plugin_settings(estimator, block)
