"""verl trainer mode ``dsdr_sync``: verl's synchronous v1 trainer plus the group-level DSDR / DARLING
reward and the coupling weights of the local term.

Select it with ``trainer.v1.trainer_mode=dsdr_sync`` beside ``algorithm.adv_estimator=<dsdr name>``.
Before verl's own ``_compute_advantage`` (KL-in-reward, rollout correction, the estimator dispatch,
all unchanged) it reads the step's ``responses``, ``uid`` and verifier scores from the
TransferQueue, decodes the responses, and writes back (:mod:`.group_rewards`):

* ``rm_scores``: the shaped reward (Eq. 11 / Eq. 16) on each response's last token, float64 (the
  DSDR bonus is ~1e-4 of the reward; float32 would round the differences between rollouts away);
* ``dsdr_weights``: the coupling weight w_i (Eq. 12) on each response token, read by the actor
  loss (:mod:`.loss`), whose ``lambda_l`` and batch divisor go with the update's ``extra_info``.

The actor workers are :class:`.worker.DsdrActorRolloutRefWorker` (verl's, with the DSDR loss).
"""

from __future__ import annotations

from typing import Any

import ray
import torch
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf, open_dict
from tensordict import TensorDict
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from dsdr_train.integrations.verl.estimators import REWARDS_SHAPED_KEY
from dsdr_train.integrations.verl.group_rewards import group_metrics, group_rewards, token_rows, verifier_accuracy
from dsdr_train.integrations.verl.loss import CLAMP_KEY, LAMBDA_L_KEY, NUM_GROUPS_KEY, WEIGHTS_FIELD
from dsdr_train.integrations.verl.settings import PluginSettings, plugin_settings
from dsdr_train.integrations.verl.worker import DsdrActorRolloutRefWorker

TRAINER_MODE = "dsdr_sync"
_ACTOR_ROLES = (Role.Actor, Role.ActorRollout, Role.ActorRolloutRef)


def settings_from_verl_config(config: DictConfig) -> PluginSettings:
    """:class:`PluginSettings` of a verl run: ``algorithm.adv_estimator`` and the ``dsdr:`` block."""
    block = config.get("dsdr", None)
    block = OmegaConf.to_container(block, resolve=True) if block is not None else None
    return plugin_settings(str(config.algorithm.adv_estimator), block)


def _accuracy_entries(extra_fields: Any, n: int) -> list[Any] | None:
    """``reward_extra_info["acc"]`` of each rollout (None where absent), or None when no rollout has one."""
    if extra_fields is None:
        return None
    entries = []
    for item in list(extra_fields):
        info = item.get("reward_extra_info", {}) if isinstance(item, dict) else {}
        entries.append(info.get("acc") if isinstance(info, dict) else None)
    if len(entries) != n or all(e is None for e in entries):
        return None
    return entries


@register_trainer(TRAINER_MODE)
class DsdrPPOTrainer(PPOTrainerSync):
    """verl's sync trainer with the plugin's group rewards and actor workers (see the module docstring)."""

    def __init__(self, config: DictConfig):
        self.dsdr = settings_from_verl_config(config)
        super().__init__(config)
        self._diversity_models: tuple[Any, Any] | None = None

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        for role in _ACTOR_ROLES:
            if role in self.role_worker_mapping:
                self.role_worker_mapping[role] = ray.remote(DsdrActorRolloutRefWorker)

    def _encoder_and_equivalence(self) -> tuple[Any, Any]:
        """DSDR's sentence encoder and DARLING's partition, built once, as the compact trainer does."""
        if self._diversity_models is None:
            settings, reward = self.dsdr, self.dsdr.objective.reward
            encoder = equivalence = None
            if reward == "dsdr" or settings.darling_partition.startswith("embedding"):
                from dsdr_eval.diversity import load_encoder

                encoder = load_encoder(settings.encoder, device=settings.encoder_device, chunked=settings.encoder_chunked,
                                       max_seq_length=settings.encoder_max_seq_length)
            if reward == "darling":
                from dsdr_eval.partition_methods import make_equivalence

                equivalence = make_equivalence(settings.darling_partition, encoder=encoder,
                                               threshold=settings.darling_threshold, device=settings.encoder_device)
            self._diversity_models = (encoder, equivalence)
        return self._diversity_models

    def _shape_group_rewards(self, batch: Any, metrics: dict) -> None:
        fields = ["uid", "responses", "response_mask", "rm_scores", "extra_fields"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        masks = list(data["response_mask"].unbind())
        responses = list(data["responses"].unbind())
        texts = self.tokenizer.batch_decode([r.tolist() for r in responses], skip_special_tokens=True)
        scores = torch.stack([s.to(torch.float64).sum() for s in data["rm_scores"].unbind()])
        accuracy = verifier_accuracy(scores, _accuracy_entries(data.get("extra_fields", None), len(texts)))
        uid = data["uid"]
        uids = uid.tolist() if hasattr(uid, "tolist") else list(uid)
        # verl's synthetic padding rows (padding_utils: a copy of the first sample's metadata, empty
        # response) are no rollouts: they get reward 0 and weight 0 and stay out of every group's diversity
        real = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        encoder, equivalence = self._encoder_and_equivalence()
        rewards = group_rewards([texts[i] for i in real], [uids[i] for i in real], accuracy[real],
                                torch.tensor([int(masks[i].sum()) for i in real]),
                                int(self.config.actor_rollout_ref.rollout.response_length), self.dsdr,
                                encoder=encoder, equivalence=equivalence)
        shaped = torch.zeros(len(texts), dtype=torch.float64)
        weights = torch.zeros(len(texts), dtype=torch.float64)
        shaped[real], weights[real] = rewards.shaped.shaped, rewards.shaped.weights
        new_scores, new_weights = token_rows(masks, shaped, weights)
        # One field per put: transfer_queue 0.1.11 drops a NEW field put together with an existing
        # one (the weights were then missing in the actor; tests_verl/test_trainer_tq.py)
        for name, rows in ((WEIGHTS_FIELD, new_weights), ("rm_scores", new_scores)):
            output = TensorDict({name: torch.nested.as_nested_tensor(rows, layout=torch.jagged)}, batch_size=len(batch))
            tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)
        metrics.update(group_metrics(rewards))

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        if self.dsdr.shapes_rewards:
            self._shape_group_rewards(batch, metrics)
            objective = self.dsdr.objective
            bound = 1.0 + objective.lambda_d * objective.sigma_d if objective.reward == "dsdr" else 1.0
            with open_dict(self.config.algorithm):
                self.config.algorithm[REWARDS_SHAPED_KEY] = bound
        return super()._compute_advantage(batch, metrics)

    def _update_actor(self, batch: Any, metrics: dict) -> Any:
        objective = self.dsdr.objective
        if objective.local_term and objective.lambda_l > 0:
            extra = {LAMBDA_L_KEY: float(objective.lambda_l), CLAMP_KEY: float(objective.log_ratio_clamp)}
            if objective.local_norm == "prompts":
                extra[NUM_GROUPS_KEY] = int(self.config.actor_rollout_ref.actor.ppo_mini_batch_size)
            batch.extra_info.update(extra)
        return super()._update_actor(batch, metrics)
