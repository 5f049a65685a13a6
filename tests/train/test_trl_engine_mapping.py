"""TrainConfig -> GRPOConfig: the compact trainer's batch geometry on TRL (paper scale on 8 and 7
processes), the passthrough keys, and one-line errors for layouts TRL cannot express."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsdr_eval.errors import DsdrError
from dsdr_train.config import load_yaml, resolve_config
from dsdr_train.integrations.trl.mapping import geometry, grpo_config_kwargs

PAPER = Path(__file__).resolve().parents[2] / "dsdr_train" / "configs" / "paper_dsdr.yaml"


def _paper(**changes):
    return resolve_config({**load_yaml(PAPER), "out": "runs/x", "val_data": None, "micro_batch_size": 4,
                           "engine": "trl", **changes})


def test_paper_scale_geometry_on_8_processes():
    cfg = _paper(rollout_engine="vllm", vllm_mode="server", vllm_server_base_url="http://h:8000",
                 report_to="wandb,tensorboard")
    geo = geometry(cfg, 8)
    # 256 prompts x 8 = 2048 rollouts, 256 per GPU; 16 prompts x 8 / 8 GPUs = 16 per update = 4 x 4
    assert (geo.rows_per_process, geo.steps_per_generation, geo.grad_accum, geo.updates_per_step) == (256, 64, 4, 16)
    kw = grpo_config_kwargs(cfg, geo, Path("runs/x"), device_type="cuda")
    assert kw["num_generations"] == 8 and kw["per_device_train_batch_size"] == 4
    assert (kw["epsilon"], kw["epsilon_high"], kw["beta"]) == (0.2, 0.28, 0.0)
    assert (kw["temperature"], kw["top_p"], kw["top_k"], kw["learning_rate"]) == (1.0, 1.0, 0, 1e-6)
    assert kw["max_completion_length"] == 4096 and kw["max_steps"] == 500 * 16 and kw["save_steps"] == 50 * 16
    assert kw["use_vllm"] and kw["vllm_mode"] == "server" and kw["vllm_server_base_url"] == "http://h:8000"
    assert kw["vllm_importance_sampling_correction"] is False and kw["bf16"] is True
    assert kw["report_to"] == ["wandb", "tensorboard"] and kw["gradient_checkpointing"] is True
    assert kw["output_dir"] == str(Path("runs/x") / "checkpoints")


def test_grpo_config_accepts_the_mapping():
    pytest.importorskip("trl")
    from trl import GRPOConfig

    cfg = _paper(total_steps=2, prompts_per_step=16, dtype="float32")
    geo = geometry(cfg, 1)
    args = GRPOConfig(**grpo_config_kwargs(cfg, geo, Path("/nonexistent-run"), device_type="cpu"))
    assert (args.generation_batch_size, args.steps_per_generation, args.gradient_accumulation_steps) == (128, 32, 32)
    assert (args.epsilon, args.epsilon_high, args.num_generations, args.max_steps) == (0.2, 0.28, 8, 2)


@pytest.mark.parametrize("changes, world, key", [
    ({"micro_batch_size": 3}, 8, "micro_batch_size"),
    ({"mini_batch_prompts": 12, "prompts_per_step": 240}, 8, "mini_batch_prompts"),  # 12 prompts on 8 GPUs
    ({"prompts_per_step": 255, "mini_batch_prompts": 255, "group_size": 2}, 4, "prompts_per_step"),
])
def test_layouts_trl_cannot_express_name_the_key(changes, world, key):
    with pytest.raises(DsdrError, match=key):
        geometry(_paper(**changes), world)


def test_rollout_engine_auto_on_trl_is_vllm_only_with_a_gpu():
    from dsdr_train.integrations.trl.mapping import rollout_choice

    cfg = _paper(rollout_engine="auto", vllm_mode="colocate")
    gpu = rollout_choice(cfg, cuda_available=True, vllm_ok=True)
    assert gpu.chosen == "vllm" and "colocate" in gpu.reason and gpu.inputs["engine"] == "trl"
    cpu = rollout_choice(cfg, cuda_available=False, vllm_ok=True)
    assert cpu.chosen == "hf" and "no CUDA GPU" in cpu.reason and "cpu_vllm_min_token_budget" not in cpu.inputs
    assert rollout_choice(cfg, cuda_available=True, vllm_ok=False).chosen == "hf"
    assert rollout_choice(_paper(rollout_engine="vllm"), cuda_available=False, vllm_ok=False).chosen == "vllm"
    # the GRPOConfig follows the choice: auto on a CPU machine generates with transformers
    assert grpo_config_kwargs(_paper(rollout_engine="auto"), geometry(cfg, 8), Path("runs/x"),
                              device_type="cpu")["use_vllm"] is False


@pytest.mark.parametrize("changes, world, micro", [
    # the smallest config: 2 prompts x G=2 on one process = 4 rollouts, was refused (8 does not divide 4)
    ({"group_size": 2, "prompts_per_step": 2, "mini_batch_prompts": 2}, 1, 4),
    ({"group_size": 3, "prompts_per_step": 4, "mini_batch_prompts": 2}, 1, 6),
    ({"group_size": 5, "prompts_per_step": 7, "mini_batch_prompts": 7}, 1, 7),
    ({}, 8, 8),  # paper scale: 16 rollouts per process per mini-batch
    ({"group_size": 8, "prompts_per_step": 24, "mini_batch_prompts": 12}, 4, 8),  # 24 per process
    ({"group_size": 3, "prompts_per_step": 6, "mini_batch_prompts": 6}, 2, 3),  # 9 per process
])
def test_unset_micro_batch_size_is_the_largest_divisor_up_to_8_and_recorded(changes, world, micro):
    cfg = _paper(**changes, micro_batch_size=None)
    assert cfg.micro_batch_size is None  # unset stays unset in config.json; the choice is in engine_layout
    geo = geometry(cfg, world)
    per_mini = cfg.mini_batch_prompts * cfg.group_size // world
    assert geo.micro_batch_size == micro and per_mini % micro == 0 and geo.grad_accum == per_mini // micro
    assert geo.micro_batch_size_from.startswith("default") and str(per_mini) in geo.micro_batch_size_from
    kw = grpo_config_kwargs(cfg, geo, Path("runs/x"), device_type="cpu")
    assert kw["per_device_train_batch_size"] == micro


def test_a_user_set_micro_batch_size_is_kept_or_refused_never_changed():
    assert geometry(_paper(micro_batch_size=4), 8).micro_batch_size_from == "config"
    with pytest.raises(DsdrError, match="micro_batch_size.*got 8"):  # set explicitly, even to the default's value
        geometry(_paper(group_size=2, prompts_per_step=2, mini_batch_prompts=2, micro_batch_size=8), 1)


def test_compact_engine_default_micro_batch_size_is_still_8():
    assert _paper(engine="compact", micro_batch_size=None).micro_batch_size == 8
