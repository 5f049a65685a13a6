"""The plugin's actor loss (verl's ppo_loss - lambda_l * J_local) and its gradient equal core_algos'
compute_policy_loss - lambda_l * dsdr_local_entropy_term on the same tensors (Eq. 14), on verl's
own micro-batch layout (nested prompts/responses, flat log-probs, non-tensor batch info)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.workers.config.actor import ActorConfig, PolicyLossConfig
from verl.workers.utils.losses import ppo_loss

from dsdr_train.core_algos import compute_policy_loss, dsdr_local_entropy_term
from dsdr_train.integrations.verl.loss import LAMBDA_L_KEY, NUM_GROUPS_KEY, WEIGHTS_FIELD, dsdr_ppo_loss

PROMPT_LENS, RESPONSE_LENS = [3, 2, 4, 3], [4, 2, 3, 1]  # rollouts 0, 1 of prompt A; 2, 3 of prompt B
T, LAMBDA_L = 4, 0.5  # a large lambda_l so a wrong J_local cannot hide under the PPO term
WEIGHTS = torch.tensor([0.7, 0.3, 1.0, 0.0])  # Eq. 12: softmax over each prompt's correct rollouts


def _config() -> ActorConfig:
    return ActorConfig(strategy="fsdp", rollout_n=2, ppo_micro_batch_size_per_gpu=1, clip_ratio=0.2,
                       clip_ratio_low=0.2, clip_ratio_high=0.28, loss_agg_mode="seq-mean-token-mean",
                       policy_loss=PolicyLossConfig(loss_mode="vanilla"))


def _tensors(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(T)[None, :] < torch.tensor(RESPONSE_LENS)[:, None]).to(torch.float32)
    old = -torch.rand(4, T, generator=g) * 2 - 0.1
    log_prob = (old + (torch.rand(4, T, generator=g) - 0.5) * 0.6).requires_grad_(True)  # ratios in (0.74, 1.35)
    advantages = torch.tensor([1.2, -0.8, 0.5, -1.5])[:, None].expand(4, T).contiguous()
    return log_prob, old, advantages, mask


def _nested(rows):
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def _micro_batch(rows, old, advantages, mask, *, lambda_l, num_groups, global_batch_size):
    data = TensorDict({
        "prompts": _nested([torch.arange(PROMPT_LENS[i]) for i in rows]),
        "responses": _nested([torch.arange(RESPONSE_LENS[i]) for i in rows]),
        "response_mask": _nested([mask[i, :RESPONSE_LENS[i]] for i in rows]),
        "old_log_probs": _nested([old[i, :RESPONSE_LENS[i]] for i in rows]),
        "advantages": _nested([advantages[i, :RESPONSE_LENS[i]] for i in rows]),
        WEIGHTS_FIELD: _nested([WEIGHTS[i].expand(RESPONSE_LENS[i]).contiguous() for i in rows]),
    }, batch_size=len(rows))
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=None, global_batch_size=global_batch_size)
    if lambda_l is not None:
        tu.assign_non_tensor(data, **{LAMBDA_L_KEY: lambda_l, NUM_GROUPS_KEY: num_groups})
    return data


def _flat_log_probs(log_prob, rows):
    """verl's model output: one flat row of [prompt | response] positions, the log-prob of response
    token t at prompt_len - 1 + t (no_padding_2_padding's left shift)."""
    parts = []
    for i in rows:
        parts += [torch.zeros(PROMPT_LENS[i] - 1), log_prob[i, :RESPONSE_LENS[i]], torch.zeros(1)]
    return torch.cat(parts)


def _ours(log_prob, old, advantages, mask, rows=(0, 1, 2, 3), lambda_l=LAMBDA_L, global_batch_size=4):
    data = _micro_batch(list(rows), old, advantages, mask, lambda_l=lambda_l, num_groups=2,
                        global_batch_size=global_batch_size)
    loss, metrics = dsdr_ppo_loss(_config(), {"log_probs": _flat_log_probs(log_prob, rows)}, data)
    return loss, metrics


def test_loss_and_gradient_equal_core_algos():
    log_prob, old, advantages, mask = _tensors()
    loss, metrics = _ours(log_prob, old, advantages, mask)
    (grad,) = torch.autograd.grad(loss, log_prob)

    reference = log_prob.detach().clone().requires_grad_(True)
    pg, _ = compute_policy_loss(reference, old, advantages[:, 0], mask, clip_ratio_low=0.2, clip_ratio_high=0.28,
                                loss_agg_mode="seq-mean-token-mean", num_sequences=4)
    j_local = dsdr_local_entropy_term(reference, old, mask, WEIGHTS, num_groups=2)
    expected = pg - LAMBDA_L * j_local
    (expected_grad,) = torch.autograd.grad(expected, reference, retain_graph=True)
    assert torch.allclose(loss, expected, atol=1e-6, rtol=0)
    assert torch.allclose(grad * mask, expected_grad * mask, atol=1e-6, rtol=0)
    assert abs(float(metrics["actor/dsdr_loss_local"].values[0]) + LAMBDA_L * float(j_local)) < 1e-6
    # and the term is really there: J_local's gradient is not negligible next to the PPO term's
    (pg_grad,) = torch.autograd.grad(pg, reference)
    assert float((expected_grad - pg_grad).abs().max()) > 1e-2


def test_without_lambda_l_it_is_verl_ppo_loss_exactly():
    log_prob, old, advantages, mask = _tensors(1)
    data = _micro_batch([0, 1, 2, 3], old, advantages, mask, lambda_l=None, num_groups=None, global_batch_size=4)
    ours, _ = dsdr_ppo_loss(_config(), {"log_probs": _flat_log_probs(log_prob, range(4))}, data)
    data = _micro_batch([0, 1, 2, 3], old, advantages, mask, lambda_l=None, num_groups=None, global_batch_size=4)
    verl, _ = ppo_loss(_config(), {"log_probs": _flat_log_probs(log_prob, range(4))}, data)
    assert torch.equal(ours, verl)


@pytest.mark.parametrize("split", [(0, 1), (0, 2, 3)])
def test_micro_batch_shares_add_up_to_the_one_pass_loss(split):
    log_prob, old, advantages, mask = _tensors(2)
    whole, _ = _ours(log_prob, old, advantages, mask)
    rest = tuple(i for i in range(4) if i not in split)
    parts = [_ours(log_prob, old, advantages, mask, rows=rows)[0] for rows in (split, rest)]
    assert torch.allclose(parts[0] + parts[1], whole, atol=1e-6, rtol=0)


def test_lambda_l_without_the_weights_field_is_an_error():
    log_prob, old, advantages, mask = _tensors(3)
    data = _micro_batch([0, 1], old, advantages, mask, lambda_l=LAMBDA_L, num_groups=2, global_batch_size=2)
    del data[WEIGHTS_FIELD]
    with pytest.raises(KeyError, match=WEIGHTS_FIELD):
        dsdr_ppo_loss(_config(), {"log_probs": _flat_log_probs(log_prob, (0, 1))}, data)
