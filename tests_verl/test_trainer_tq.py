"""Trainer mode dsdr_sync's advantage step on a real TransferQueue (local Ray, CPU): the group reward
written back by the plugin, then verl's own PPOTrainer._compute_advantage and estimator dispatch,
give core_algos' advantages; the coupling weights land in the field the actor loss reads."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from dsdr_eval.diversity_metrics import load_encoder
from dsdr_eval.grading import extract_rows
from dsdr_train import scoring
from dsdr_train.core_algos import RolloutSignals, group_ids_from_prompt_index, objective_config, shape_rewards
from dsdr_train.integrations.verl.loss import WEIGHTS_FIELD
from dsdr_train.integrations.verl.trainer import DsdrPPOTrainer, settings_from_verl_config
from dsdr_train.rollout import RolloutBatch

VOCAB = ["We", "have", "$x^2 = 4$", "so", "$x = 2$", "\\boxed{2}", "\\boxed{3}", "Since", "\\(2 + 2 = 4\\)", "the",
         "answer", "is", "<eos>"]
RESPONSES = [[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 6], [0, 1, 4, 5], [9, 10, 11, 5, 12],
             [7, 8, 3, 5], [0, 2, 5], [1, 4, 9, 10, 11, 5], [5]]
UIDS = ["p-a", "p-b", "p-a", "p-b", "p-a", "p-b", "p-b", "p-a"]
ACC = [True, False, True, True, False, True, True, True]  # math_dapo: score +1 / -1, verdict in acc


class WordTokenizer:
    pad_token_id = 12

    def batch_decode(self, rows, skip_special_tokens=True):
        return [" ".join(VOCAB[t] for t in row if not (skip_special_tokens and t == 12)) for row in rows]


@pytest.fixture(scope="module")
def queue():
    ray = pytest.importorskip("ray")
    import transfer_queue as tq

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # TQ controller + storage actors
    tq.init(OmegaConf.create({"enable": True, "metrics": {"enabled": False, "port": 0}, "backend": {
        "storage_backend": "SimpleStorage", "SimpleStorage": {"total_storage_size": 256, "num_data_storage_units": 1}}}))
    yield tq
    tq.close()
    ray.shutdown()


def _put_rollouts(tq):
    from transfer_queue import KVBatchMeta
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    keys, fields = [f"k{i}" for i in range(len(UIDS))], []
    for response, uid, acc in zip(RESPONSES, UIDS, ACC):
        scores = torch.zeros(len(response))
        scores[-1] = 1.0 if acc else -1.0
        fields.append({"prompts": torch.arange(3), "responses": torch.tensor(response),
                       "response_mask": torch.ones(len(response), dtype=torch.int64), "rm_scores": scores,
                       "old_log_probs": -torch.ones(len(response)), "uid": uid,
                       "extra_fields": {"reward_extra_info": {"acc": acc}}})
    tags = [{"status": "success"} for _ in keys]
    tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(fields), tags=tags)
    return KVBatchMeta(keys=keys, tags=tags, partition_id="train")


def _trainer(encoder) -> DsdrPPOTrainer:
    config = OmegaConf.create({
        "algorithm": {"adv_estimator": "dsdr", "use_kl_in_reward": False, "gamma": 1.0, "lam": 1.0,
                      "norm_adv_by_std_in_grpo": True, "rollout_correction": None},
        "actor_rollout_ref": {"rollout": {"n": 4, "response_length": 8}, "actor": {"ppo_mini_batch_size": 2}},
        "dsdr": {"lambda_d": 0.05}})
    trainer = DsdrPPOTrainer.__new__(DsdrPPOTrainer)  # the advantage step needs no workers
    trainer.config, trainer.dsdr, trainer.tokenizer = config, settings_from_verl_config(config), WordTokenizer()
    trainer._diversity_models = (encoder, None)
    return trainer


def test_advantage_step_on_the_transfer_queue_equals_core_algos(queue):
    encoder = load_encoder(None)
    batch = _put_rollouts(queue)
    metrics: dict = {}
    _trainer(encoder)._compute_advantage(batch, metrics)
    out = queue.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["advantages", WEIGHTS_FIELD])

    texts = WordTokenizer().batch_decode(RESPONSES)
    group_ids = group_ids_from_prompt_index(UIDS)
    graded = extract_rows({"completion": text} for text in texts)
    d = scoring.group_diversity(RolloutBatch(texts=texts, group_ids=group_ids.tolist()), graded, encoder, "extended")[2]
    expected = shape_rewards(RolloutSignals(
        accuracy=torch.tensor(ACC, dtype=torch.float64), group_ids=group_ids,
        response_lengths=torch.tensor([len(r) for r in RESPONSES]), max_response_length=8,
        diversity=torch.tensor(d, dtype=torch.float64)), objective_config("dsdr", lambda_d=0.05))
    for i, (advantages, weights) in enumerate(zip(out["advantages"].unbind(), out[WEIGHTS_FIELD].unbind())):
        assert torch.allclose(advantages.to(torch.float64), expected.advantages[i].expand(len(RESPONSES[i])),
                              atol=1e-5, rtol=0), i
        assert torch.allclose(weights.to(torch.float64), expected.weights[i].expand(len(RESPONSES[i])), atol=1e-6), i
    assert metrics["dsdr/acc/mean"] == pytest.approx(sum(ACC) / len(ACC))
    assert metrics["dsdr/bonus/mean"] > 0


class RecordingActorGroup:
    """Stands in for the actor worker group: records the update's batch, returns verl-shaped metrics."""

    def __init__(self):
        self.extra_info = None

    def update_actor(self, batch):
        self.extra_info = dict(batch.extra_info)
        return {"metrics": {"mfu": 0.0, "pg_loss": 0.1}}


@pytest.mark.parametrize(("estimator", "local_norm", "sent"), [
    ("dsdr", "prompts", {"dsdr_lambda_l": 0.001, "dsdr_num_groups": 2, "dsdr_log_ratio_clamp": 20.0}),
    ("dsdr_wo_gd", "none", {"dsdr_lambda_l": 0.001, "dsdr_log_ratio_clamp": 20.0}),
    ("dsdr_wo_gc", None, {}),
])
def test_the_update_carries_lambda_l_and_the_divisor_to_the_actor(estimator, local_norm, sent):
    from transfer_queue import KVBatchMeta

    trainer = _trainer(None)
    block = {"local_norm": local_norm} if local_norm else {}
    trainer.config = OmegaConf.merge(trainer.config, {
        "algorithm": {"adv_estimator": estimator}, "dsdr": None,
        "actor_rollout_ref": {"actor": {"calculate_entropy": False, "entropy_coeff": 0.0, "ppo_epochs": 1,
                                        "data_loader_seed": 0, "shuffle": False}, "rollout": {"temperature": 1.0}}})
    trainer.config.dsdr = block
    trainer.dsdr = settings_from_verl_config(trainer.config)
    trainer.actor_rollout_wg = RecordingActorGroup()
    trainer._update_actor(KVBatchMeta(keys=["a"], tags=[{}], partition_id="train"), {})
    got = {k: v for k, v in trainer.actor_rollout_wg.extra_info.items() if k.startswith("dsdr_")}
    assert got == sent
    assert trainer.actor_rollout_wg.extra_info["global_batch_size"] == 2 * 4  # verl's own keys still there
