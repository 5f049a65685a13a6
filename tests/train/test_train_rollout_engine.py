"""rollout_engine: auto's choice (vllm where it pays, the reason recorded) and the vLLM engine's weight
sync, which runs only when the policy has changed since the last one (no vllm needed: a fake engine)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dsdr_train.rollout import CPU_VLLM_SYNC_S, VLLMRollout, choose_rollout_engine

SMALL = dict(total_steps=4, prompts_per_step=2, group_size=4, max_response_length=16)
PAPER = dict(total_steps=100, prompts_per_step=256, group_size=8, max_response_length=4096)


def test_auto_picks_vllm_where_it_pays_and_says_why():
    assert choose_rollout_engine("auto", **SMALL, vllm_importable=False).chosen == "hf"
    assert choose_rollout_engine("auto", **SMALL, vllm_importable=True, cuda_available=True).chosen == "vllm"
    small = choose_rollout_engine("auto", **SMALL, vllm_importable=True, cuda_available=False)
    assert small.chosen == "hf" and "engine start" in small.reason
    paper = choose_rollout_engine("auto", **PAPER, vllm_importable=True, cuda_available=False)
    assert paper.chosen == "vllm" and paper.inputs["cpu_vllm_sync_s"] == CPU_VLLM_SYNC_S
    assert paper.inputs["generation_saved_s"] > paper.inputs["engine_cost_s"]
    assert choose_rollout_engine("hf", **PAPER, vllm_importable=True, cuda_available=True).chosen == "hf"


def test_auto_counts_the_weight_syncs_eval_does_not_pay():
    """A budget just past eval's break-even, spread over many steps: the syncs tip it back to hf."""
    from dsdr_eval.backends import CPU_VLLM_MIN_TOKEN_BUDGET

    many_steps = dict(total_steps=CPU_VLLM_MIN_TOKEN_BUDGET // 16 + 1, prompts_per_step=1, group_size=1,
                      max_response_length=16)
    assert choose_rollout_engine("auto", **many_steps, vllm_importable=True, cuda_available=False).chosen == "hf"


class FakeLLM:
    """Counts weight pushes; generates one empty completion per prompt x n."""

    def __init__(self) -> None:
        self.pushed: list[dict] = []

    def collective_rpc(self, method, kwargs):
        self.pushed.append(dict(kwargs["weights_iterator"]))

    def reset_prefix_cache(self):
        pass

    def generate(self, prompts, params, use_tqdm=False):
        done = SimpleNamespace(token_ids=[2], text="", finish_reason="stop", logprobs=None)
        return [SimpleNamespace(outputs=[done] * params.n) for _ in prompts]


def fake_engine() -> VLLMRollout:
    engine = object.__new__(VLLMRollout)  # skip the engine start: only the sync bookkeeping is under test
    engine.llm, engine.eos_ids, engine.record_log_probs = FakeLLM(), (2,), False
    engine.synced_version, engine.sync_count, engine.sync_s = 0, 0, 0.0
    return engine


def test_weight_sync_is_a_no_op_until_the_policy_changes():
    policy = torch.nn.Linear(2, 2)
    engine = fake_engine()
    kw = dict(n=2, temperature=1.0, top_p=1.0, max_new_tokens=4, group_ids=[0], problem_idx=[0])
    engine.generate(policy, [[1, 2]], weights_version=0, **kw)  # the engine started from these weights
    engine.generate(policy, [[1, 2]], weights_version=0, **kw)  # a second DAPO generation batch / validation
    assert engine.llm.pushed == []
    with torch.no_grad():
        policy.weight.add_(1.0)
    engine.generate(policy, [[1, 2]], weights_version=1, **kw)
    engine.generate(policy, [[1, 2]], weights_version=1, **kw)
    assert len(engine.llm.pushed) == 1 and engine.sync_count == 1
    assert torch.equal(engine.llm.pushed[0]["weight"], policy.weight)
    engine.generate(policy, [[1, 2]], **kw)  # no version given: always push
    assert len(engine.llm.pushed) == 2


@pytest.mark.slow  # trains the tiny Llama
def test_the_run_records_the_rollout_engine_choice(tiny_model_dir, train_data_dir, tmp_path):
    import json

    from dsdr_train.cli import main

    out = tmp_path / "run"
    code = main(["--algo", "grpo", "--model", str(tiny_model_dir), "--train-data", str(train_data_dir / "gsm8k_train.jsonl"),
                 "--out", str(out), "total_steps=1", "group_size=2", "prompts_per_step=1", "mini_batch_prompts=1",
                 "micro_batch_size=2", "max_response_length=4", "max_train_examples=4", "save_every=0",
                 "save_final=false", "log_diversity=false", "progress=false"])
    assert code == 0
    record = json.loads((out / "config.json").read_text())
    assert record["config"]["rollout_engine"] == "auto"
    assert record["rollout_engine"]["chosen"] == "hf" and record["rollout_engine"]["reason"]
