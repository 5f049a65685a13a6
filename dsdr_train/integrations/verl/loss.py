"""The actor loss of DSDR on verl: verl's own ``ppo_loss`` minus ``lambda_l * J_local``
(docs/ALGORITHMS.md §3.5, Eq. 14; J_local of §3.4, Eq. 13 from
:func:`dsdr_train.core_algos.dsdr_local_entropy_term`).

verl 0.9.1 has no hook for a per-sequence weighted term: the loss is the function the worker hands
to its engine (``set_loss_fn`` in ``verl/workers/engine_workers.py``). :mod:`.worker` swaps in
:func:`dsdr_ppo_loss`; the coupling weights travel per token as :data:`WEIGHTS_FIELD` (written by
:mod:`.trainer`), and ``lambda_l`` / the batch divisor as non-tensor entries the trainer adds to
the update's ``extra_info``.

Pieces of a mini-batch: verl calls the loss once per micro-batch on each data-parallel rank and
averages gradients over ranks. Like verl's ``agg_loss`` the term is this micro-batch's share of the
whole mini-batch's value times ``dp_size``: ``J_local`` is summed here and divided by the number of
prompts of the whole mini-batch (``local_norm=prompts``, the trainer passes
``ppo_mini_batch_size`` = prompts per update), so the shares add up to the one-pass value.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import no_padding_2_padding

from dsdr_train.core_algos import dsdr_local_entropy_term

WEIGHTS_FIELD = "dsdr_weights"  # per token: the coupling weight w_i of the token's rollout (Eq. 12)
LAMBDA_L_KEY = "dsdr_lambda_l"  # float; 0 or absent = verl's ppo_loss unchanged
NUM_GROUPS_KEY = "dsdr_num_groups"  # prompts per mini-batch (None = the literal sum, local_norm=none)
CLAMP_KEY = "dsdr_log_ratio_clamp"  # the log-ratio clamp of rho in J_local (§1: 20)


def sequence_weights(per_token: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` w_i from the ``[B, T]`` per-token copy (constant over a row's valid tokens; 0 for a
    row without one)."""
    mask = response_mask.to(per_token.dtype)
    return (per_token * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)


def local_term(log_prob: torch.Tensor, data: TensorDict) -> torch.Tensor:
    """This micro-batch's share of ``J_local`` (to maximise), scaled by ``dp_size`` as verl's
    ``agg_loss`` is. ``log_prob``: ``[B, T]`` padded response log-probs (with grad)."""
    padded = data.select("response_mask", "old_log_probs", WEIGHTS_FIELD).to_padded_tensor()
    mask = padded["response_mask"].to(torch.bool)
    weights = sequence_weights(padded[WEIGHTS_FIELD].to(torch.float64), mask)
    num_groups = tu.get(data, NUM_GROUPS_KEY, None)
    j_local = dsdr_local_entropy_term(
        log_prob, padded["old_log_probs"], mask, weights.to(log_prob.dtype),
        clamp=float(tu.get(data, CLAMP_KEY, 20.0)), num_groups=None if num_groups is None else float(num_groups))
    return j_local * float(data["dp_size"])


def dsdr_ppo_loss(config: Any, model_output: dict, data: TensorDict, dp_group: Any = None
                  ) -> tuple[torch.Tensor, dict]:
    """verl's ``ppo_loss(config, model_output, data, dp_group)`` minus ``lambda_l * J_local``
    (Eq. 14: the objective is ``J_GRPO + lambda_l * J_local``; the loss is its negative)."""
    loss, metrics = ppo_loss(config, model_output, data, dp_group)
    lambda_l = float(tu.get(data, LAMBDA_L_KEY, 0.0) or 0.0)
    if lambda_l == 0.0:
        return loss, metrics
    if WEIGHTS_FIELD not in data.keys():  # never train without the term the run asked for
        raise KeyError(f"{LAMBDA_L_KEY}={lambda_l} but the micro-batch has no {WEIGHTS_FIELD!r} field "
                       "(written by trainer mode dsdr_sync before the advantage step)")
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    j_local = local_term(log_prob, data)
    local_loss = -lambda_l * j_local
    # named as dsdr's metrics.jsonl "loss/local" (-lambda_l * J_local, this micro-batch's share)
    metrics["actor/dsdr_loss_local"] = Metric(value=local_loss.detach(), aggregation=AggregationType.SUM)
    return loss + local_loss, metrics
