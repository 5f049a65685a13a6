"""Forward passes share what they can: the update's scoring forward prefills each distinct prompt once
(dsdr_train.modeling.shared_prompt_logits), the generation prefill scores one position only.
The shared forward has the same logits and gradients as the full-sequence forward, on a fraction
of the tokens."""

from __future__ import annotations

import pytest
import torch

from dsdr_train.modeling import pad_rollouts, response_logits, rollout_logits, shared_prompt_logits
from dsdr_train.rollout import RolloutBatch


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


def two_groups() -> RolloutBatch:
    """Two prompts of different lengths (left padding) x 3 rollouts of different lengths (right padding)."""
    batch = RolloutBatch()
    prompts = [[5, 17, 99, 4, 8, 250, 31], [7, 300, 12]]
    responses = [[[11, 12, 13, 14], [15], [16, 17, 18, 19, 20]], [[21, 22], [23, 24, 25, 26, 27, 28], [29]]]
    for g, (p, outs) in enumerate(zip(prompts, responses)):
        for o in outs:
            batch.prompt_ids.append(p), batch.response_ids.append(o), batch.texts.append("")
            batch.finish_reasons.append("stop"), batch.group_ids.append(g), batch.problem_idx.append(g)
    return batch


def test_shared_prompt_logits_and_gradients_equal_the_full_forward(policy):
    batch, rows = two_groups(), [0, 3, 1, 4, 2, 5]  # groups interleaved: the gather must follow rows
    t = pad_rollouts(batch, rows, 0, torch.device("cpu"))
    full = response_logits(policy, t)
    shared, labels, mask = shared_prompt_logits(policy, batch, rows, 0, torch.device("cpu"))
    assert torch.equal(mask, t["response_mask"]) and torch.equal(labels * mask.long(), t["labels"] * mask.long())
    m = mask.bool()
    torch.testing.assert_close(shared[m], full[m], atol=1e-5, rtol=1e-5)
    grads = []
    for logits in (full, shared):
        policy.zero_grad()
        (logits.log_softmax(-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1) * mask).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in policy.parameters()]))
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=1e-4)


def test_update_forward_runs_each_prompt_once(policy):
    """Tokens through the embedding per scoring forward: distinct prompts + responses, not every
    rollout's prompt again (fails with the full-sequence forward: 6 x (7 + 6) tokens)."""
    batch, rows = two_groups(), list(range(6))
    seen: list[int] = []
    hook = policy.get_input_embeddings().register_forward_hook(lambda m, inp, out: seen.append(inp[0].numel()))
    try:
        policy.train()
        rollout_logits(policy, batch, rows, 0, torch.device("cpu"), share_prompts=True)
    finally:
        hook.remove()
        policy.eval()
    assert sum(seen) == 2 * 7 + 6 * 6


def _grad_of(policy, logits, labels, mask) -> torch.Tensor:
    policy.zero_grad()
    (logits.log_softmax(-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1) * mask).sum().backward()
    return torch.cat([p.grad.flatten() for p in policy.parameters()])


def test_shared_prompts_under_gradient_checkpointing_match_the_full_forward(policy):
    """transformers drops a KV cache under gradient checkpointing; the shared forward keeps a read-only
    prefix there (checkpointed response forward, unchecked prompt forward): same logits and gradients,
    still one prompt forward per group."""
    batch, rows = two_groups(), [0, 3, 1, 4, 2, 5]
    policy.train()
    t = pad_rollouts(batch, rows, 0, torch.device("cpu"))
    reference = response_logits(policy, t)
    want = _grad_of(policy, reference, t["labels"], t["response_mask"])
    seen: list[int] = []
    layer_runs: list[int] = []
    hook = policy.get_input_embeddings().register_forward_hook(lambda m, inp, out: seen.append(inp[0].numel()))
    mlp = policy.model.layers[0].mlp
    mlp_forward = mlp.forward

    def counted(*args, **kwargs):  # (forward hooks do not fire in a checkpoint's replay; this does)
        layer_runs.append(1)
        return mlp_forward(*args, **kwargs)

    mlp.forward = counted
    policy.gradient_checkpointing_enable()
    try:
        logits, labels, mask = rollout_logits(policy, batch, rows, 0, torch.device("cpu"), share_prompts=True)
        got = _grad_of(policy, logits, labels, mask)
    finally:
        hook.remove()
        del mlp.forward
        policy.gradient_checkpointing_disable()
        policy.eval()
    m = mask.bool()
    torch.testing.assert_close(logits[m], reference[m], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert seen == [2 * 7, 6 * 6]
    assert len(layer_runs) == 3  # prompt forward, response forward, and its replay in backward (checkpointed)


def test_generation_prefill_runs_the_lm_head_on_one_position_only(policy, smollm2_dir):
    """hf_sample's shared prefill discards its logits: the LM head must not score every prompt position."""
    from dsdr_eval.backends.hf import hf_sample
    from dsdr_eval.backends.sampling import SamplingSpec

    widths: list[int] = []
    hook = policy.get_output_embeddings().register_forward_hook(lambda m, inp, out: widths.append(inp[0].shape[1]))
    try:
        hf_sample(policy.eval(), [[5, 17, 99, 4, 8, 250, 31], [7, 300, 12]], SamplingSpec(1.0, 1.0, 3, (2,)), n=2,
                  pad_id=0, seed=0)
    finally:
        hook.remove()
    assert widths and max(widths) == 1, widths
