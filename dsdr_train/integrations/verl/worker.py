"""The actor worker of the plugin: verl's ``ActorRolloutRefWorker`` with the DSDR loss.

The one change is the loss function the worker hands to its training engine: after verl builds
the actor (``init_model``), :func:`.loss.dsdr_ppo_loss` replaces ``partial(ppo_loss, config=...)``
with the same actor config. Without ``lambda_l`` in the update's ``extra_info`` (every estimator
but ``dsdr`` / ``dsdr_wo_gd``) it returns verl's ``ppo_loss`` unchanged.
"""

from __future__ import annotations

from functools import partial

from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.engine_workers import ActorRolloutRefWorker

from dsdr_train.integrations.verl.loss import dsdr_ppo_loss


class DsdrActorRolloutRefWorker(ActorRolloutRefWorker):
    """``ActorRolloutRefWorker`` whose actor loss is :func:`dsdr_ppo_loss`."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        super().init_model()
        if self.actor is None or self.distillation_enabled:
            return  # a rollout-only or reference-only worker; distillation keeps verl's own loss
        actor_config = self.loss_fn.keywords["config"]
        self.loss_fn = partial(dsdr_ppo_loss, config=actor_config)
        self.actor.set_loss_fn(self.loss_fn)
