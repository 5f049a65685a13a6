"""verl trainer mode ``dsdr_sync``: verl's synchronous v1 trainer plus the spec's reward for every
plugin estimator (GRPO, DAPO, DSDR and its ablations, DARLING) and the coupling weights of the
local term.

Select it with ``trainer.v1.trainer_mode=dsdr_sync`` beside ``algorithm.adv_estimator=<plugin name>``.
Before verl's own ``_compute_advantage`` (KL-in-reward, rollout correction, the estimator dispatch,
all unchanged) it reads the step's ``responses``, ``uid`` and verifier scores from the
TransferQueue, decodes the responses, and writes back (:mod:`.group_rewards`):

* ``rm_scores``: the spec's reward on each response's last token, float64: the {0, 1} verdict
  (§1; DAPO adds Eq. 6's overlong term), the DSDR reward (Eq. 11) or DARLING's (Eq. 16). The DSDR
  bonus is ~1e-4 of the reward; float32 would round the differences between rollouts away;
* ``dsdr_weights``: the coupling weight w_i (Eq. 12) on each response token, read by the actor
  loss (:mod:`.loss`), whose ``lambda_l`` and batch divisor go with the update's ``extra_info``.

It refuses, at construction, a verl setting that would change the spec's objective
(:func:`check_verl_config`): verl's dual clip (Eq. 3 has none), a policy loss other than the
vanilla one, and a DAPO group filter that disagrees with the objective. DAPO's dynamic sampling
(§2) is verl's own (the sync ReplayBuffer evicts the groups whose accuracy does not vary and
regenerates); verl 0.9.1 ignores ``max_num_gen_batches``, so this trainer enforces it: a step that
would generate more than ``max_num_gen_batches * train_batch_size`` prompts stops the run with an
error (``dapo_exhausted=error``, verl's DAPO semantics; ``train`` is refused).

verl's ``_balance_batch`` reorders the rows over data-parallel ranks before the mini-batches are
cut, so a mini-batch need not hold whole groups. The objective does not change: the advantages and
coupling weights are computed on whole groups before the split, and every divisor of the loss is
the mini-batch's (rows, tokens) or a configured constant (J_local: ``ppo_mini_batch_size`` prompts,
as the compact trainer's full mini-batches have), never a count of the groups present
(``tests_verl/test_reference_objective.py`` checks it on a split that cuts groups).

The actor workers are :class:`.worker.DsdrActorRolloutRefWorker` (verl's, with the DSDR loss).
"""

from __future__ import annotations

import math
from typing import Any

import ray
import torch
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf, open_dict
from tensordict import TensorDict
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from dsdr_train.integrations.verl.estimators import REWARDS_FLOOR_KEY, REWARDS_SHAPED_KEY
from dsdr_train.integrations.verl.group_rewards import group_metrics, group_rewards, token_rows, verifier_accuracy
from dsdr_train.integrations.verl.loss import CLAMP_KEY, LAMBDA_L_KEY, NUM_GROUPS_KEY, WEIGHTS_FIELD
from dsdr_train.integrations.verl.settings import (PluginConfigError, PluginSettings, encoder_placement,
                                                   plugin_settings)
from dsdr_train.integrations.verl.worker import DsdrActorRolloutRefWorker

TRAINER_MODE = "dsdr_sync"
_ACTOR_ROLES = (Role.Actor, Role.ActorRollout, Role.ActorRolloutRef)


def settings_from_verl_config(config: DictConfig) -> PluginSettings:
    """:class:`PluginSettings` of a verl run: ``algorithm.adv_estimator`` and the ``dsdr:`` block."""
    block = config.get("dsdr", None)
    block = OmegaConf.to_container(block, resolve=True) if block is not None else None
    return plugin_settings(str(config.algorithm.adv_estimator), block)


def check_verl_config(config: DictConfig, settings: PluginSettings) -> None:
    """Refuse (:class:`PluginConfigError` naming the key) the verl settings that would make the
    actor loss or the data differ from the spec's objective, instead of training them silently."""
    actor = config.actor_rollout_ref.actor
    clip_c = float(actor.get("clip_ratio_c", 3.0))
    if math.isfinite(clip_c):
        raise PluginConfigError(f"actor_rollout_ref.actor.clip_ratio_c={clip_c:g} turns on verl's dual clip of "
                                "negative-advantage tokens, which docs/ALGORITHMS.md Eq. 3 does not have; set "
                                "actor_rollout_ref.actor.clip_ratio_c=inf")
    if actor.get("loss_agg_mode") == "seq-mean-token-sum-norm" and actor.get("loss_scale_factor") is None:
        raise PluginConfigError("actor_rollout_ref.actor.loss_scale_factor is unset: Eq. 4d divides by |B| * L_max, "
                                "verl then by the padded width; set it to data.max_response_length")
    loss_mode = actor.get("policy_loss", {}).get("loss_mode", "vanilla")
    if loss_mode != "vanilla":
        raise PluginConfigError(f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode!r}: the plugin's "
                                "objective is the vanilla clipped surrogate (Eq. 3)")
    objective = settings.objective
    filter_groups = config.algorithm.get("filter_groups", None) or {}
    enabled = bool(filter_groups.get("enable", False))
    if enabled != objective.dynamic_sampling:
        raise PluginConfigError(f"algorithm.filter_groups.enable={enabled} but estimator "
                                f"{settings.estimator!r} has dynamic_sampling={objective.dynamic_sampling} "
                                "(set +dsdr.dynamic_sampling or the filter to agree)")
    if not enabled:
        return
    if filter_groups.get("metric", None) != "acc":
        raise PluginConfigError(f"algorithm.filter_groups.metric={filter_groups.get('metric', None)!r}: DAPO's "
                                "filter reads the verifier's accuracy (§2), set it to acc")
    if objective.dapo_exhausted != "error":
        raise PluginConfigError(f"dsdr.dapo_exhausted={objective.dapo_exhausted!r}: verl's ReplayBuffer cannot "
                                "train on the groups kept so far; set +dsdr.dapo_exhausted=error")
    verl_cap = int(filter_groups.get("max_num_gen_batches", 0) or 0)
    if verl_cap not in (0, objective.max_num_gen_batches):
        raise PluginConfigError(f"algorithm.filter_groups.max_num_gen_batches={verl_cap} (ignored by verl 0.9.1) "
                                f"differs from dsdr.max_num_gen_batches={objective.max_num_gen_batches}, which "
                                "this trainer enforces; set them equal")


def generation_cap(settings: PluginSettings, train_batch_size: int) -> int | None:
    """Prompts one step may generate under DAPO's dynamic sampling (§2: at most
    ``max_num_gen_batches`` generation batches); None without dynamic sampling."""
    objective = settings.objective
    return objective.max_num_gen_batches * int(train_batch_size) if objective.dynamic_sampling else None


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
        check_verl_config(config, self.dsdr)
        self._generation_cap = generation_cap(self.dsdr, config.data.train_batch_size)
        self._generated = 0
        super().__init__(config)
        self._diversity_models: tuple[Any, Any] | None = None

    def prepare_step(self) -> dict:
        self._generated = int(self.config.data.train_batch_size)  # the step's first generation batch
        return super().prepare_step()

    def _add_prompts_to_generate(self, num_prompts: int) -> int:
        """verl's refill of evicted DAPO groups, capped at ``max_num_gen_batches`` batches per step (§2)."""
        self._generated += int(num_prompts)
        if self._generation_cap is not None and self._generated > self._generation_cap:
            raise RuntimeError(f"DAPO dynamic sampling: max_num_gen_batches={self.dsdr.objective.max_num_gen_batches} "
                               f"generation batches used ({self._generated} prompts asked for, cap "
                               f"{self._generation_cap}) and the batch is not full (dapo_exhausted=error)")
        return super()._add_prompts_to_generate(num_prompts)

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
            device, reason = encoder_placement(settings.encoder_device, cuda_available=torch.cuda.is_available())
            self.encoder_device = (device, reason)
            print(f"[dsdr] diversity encoder on {device}: {reason}", flush=True)
            if reward == "dsdr" or (reward == "darling" and settings.darling_partition.startswith("embedding")):
                from dsdr_eval.diversity_metrics import load_encoder

                encoder = load_encoder(settings.encoder, device=device, chunked=settings.encoder_chunked,
                                       max_seq_length=settings.encoder_max_seq_length)
            if reward == "darling":
                from dsdr_eval.diversity_metrics.partition_methods import make_equivalence

                equivalence = make_equivalence(settings.darling_partition, encoder=encoder,
                                               threshold=settings.darling_threshold, device=device)
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
        self._shape_group_rewards(batch, metrics)
        objective = self.dsdr.objective
        bound = 1.0 + objective.lambda_d * objective.sigma_d if objective.reward == "dsdr" else 1.0
        with open_dict(self.config.algorithm):
            self.config.algorithm[REWARDS_SHAPED_KEY] = bound
            self.config.algorithm[REWARDS_FLOOR_KEY] = -objective.overlong_factor if objective.overlong_shaping else 0.0
        return super()._compute_advantage(batch, metrics)

    def _update_actor(self, batch: Any, metrics: dict) -> Any:
        objective = self.dsdr.objective
        if objective.local_term and objective.lambda_l > 0:
            extra = {LAMBDA_L_KEY: float(objective.lambda_l), CLAMP_KEY: float(objective.log_ratio_clamp)}
            if objective.local_norm == "prompts":
                extra[NUM_GROUPS_KEY] = int(self.config.actor_rollout_ref.actor.ppo_mini_batch_size)
            batch.extra_info.update(extra)
        return super()._update_actor(batch, metrics)
