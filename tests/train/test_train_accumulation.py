"""The trainer's update on a hand-made rollout batch (tiny random Llama, CPU): gradient
accumulation equals one pass for every loss_agg_mode with unequal micro-batches (policy loss,
KL term and DSDR local term together), the one-pass losses match the formulas, and every
no-grad log-prob pass is dropout-free (the first mini-batch's importance ratio is 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dsdr_train import core_algos as algos
from dsdr_train import train as T
from dsdr_train import update as U
from helpers.accumulation import (ADVANTAGES, LENGTHS, MAX_RESPONSE, hand_made_batch, make_trainer,
                                  update_and_capture)

# slow: every test updates the tiny Llama (a trainer per module, 4-10 s per case)
pytestmark = pytest.mark.slow



@pytest.fixture(scope="module")
def trainer(tiny_model_dir, train_data_dir, tmp_path_factory) -> T.Trainer:
    trainer = make_trainer(tiny_model_dir, train_data_dir / "gsm8k_train.jsonl", tmp_path_factory.mktemp("acc"), [])
    # A reference policy that differs from the policy, so the KL term has a gradient.
    ref = T.load_policy(str(tiny_model_dir), torch.float32, disable_dropout=True).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    ref.requires_grad_(False)
    trainer.ref = ref
    return trainer


@pytest.mark.parametrize("mode", algos.LOSS_AGG_MODES)
def test_gradient_accumulation_equals_one_pass(trainer, mode):
    batch, shaped = hand_made_batch()
    results = {}
    for micro in (8, 3):
        trainer.cfg = trainer.cfg.replace(
            loss_agg_mode=mode, micro_batch_size=micro, local_term=True, lambda_l=0.5, use_kl=True,
            kl_coef=0.5, loss_norm_constant=MAX_RESPONSE if mode == "seq-mean-token-sum-norm" else None)
        results[micro] = update_and_capture(trainer, batch, shaped)
    (one, grad_one), (acc, grad_acc) = results[8], results[3]
    assert float((grad_one - grad_acc).norm() / grad_one.norm()) < 1e-5
    for key in ("loss/pg", "loss/local", "loss/kl", "entropy/mean", "kl/approx"):
        assert acc[key] == pytest.approx(one[key], rel=1e-5, abs=1e-7), key
    # On-policy (one update): ratio 1, so the per-token loss is -A and loss/pg follows the formula.
    signed = sum(a * n for a, n in zip(ADVANTAGES, LENGTHS))
    expected = {"token-mean": -signed / sum(LENGTHS), "seq-mean-token-mean": -sum(ADVANTAGES) / len(LENGTHS),
                "seq-mean-token-sum": -signed / len(LENGTHS),
                "seq-mean-token-sum-norm": -signed / (len(LENGTHS) * MAX_RESPONSE)}[mode]  # Eq. 4d: |B| * a fixed C
    assert one["loss/pg"] == pytest.approx(expected, abs=1e-6)
    assert one["loss/kl"] > 0 and one["loss/local"] != 0


def test_the_run_records_the_dr_grpo_constant(tiny_model_dir, train_data_dir, tmp_path):
    from dsdr_train.config import resolve_config

    values = {"model": "m", "train_data": "d", "out": "o", "max_response_length": 512}
    assert resolve_config({**values, "loss_agg_mode": "seq-mean-token-sum-norm"}).loss_norm_constant == 512
    assert resolve_config({**values, "loss_agg_mode": "seq-mean-token-sum-norm", "loss_norm_constant": 64}
                          ).loss_norm_constant == 64
    assert resolve_config(values).loss_norm_constant is None  # not used by the algorithm's token-level mode


@pytest.fixture(scope="module")
def dropout_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model with attention dropout 0.5 (Llama applies it in train mode only)."""
    import shutil

    out = tmp_path_factory.mktemp("tiny-dropout") / "model"
    shutil.copytree(tiny_model_dir, out)
    config = json.loads((out / "config.json").read_text())
    config["attention_dropout"] = 0.5
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_first_mini_batch_ratio_is_one_with_a_dropout_model(dropout_model_dir, train_data_dir, tmp_path, monkeypatch):
    """Two mini-batches, so log pi_old comes from a separate no-grad pass: before the first update
    pi_theta == pi_old, and the ratio must be exactly 1 (it was not when dropout was active)."""
    trainer = make_trainer(dropout_model_dir, train_data_dir / "gsm8k_train.jsonl", tmp_path,
                           ["mini_batch_prompts=2", "micro_batch_size=8"])
    ratios: list[tuple[float, float]] = []
    real = algos.compute_policy_loss

    def spy(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        ratios.append((stats["ratio/min"], stats["ratio/max"]))
        return loss, stats

    monkeypatch.setitem(algos.POLICY_LOSS_REGISTRY, "vanilla", spy)  # the trainer dispatches by name
    batch, shaped = hand_made_batch()
    trainer.model.train()
    trainer.update(batch, shaped)
    assert len(ratios) == 2
    low, high = ratios[0]
    assert abs(low - 1.0) < 1e-5 and abs(high - 1.0) < 1e-5, ratios[0]
    assert trainer.model.training  # the no-grad pass restored train mode


def test_no_grad_log_prob_passes_run_in_eval_mode(dropout_model_dir, train_data_dir, tmp_path):
    """disable_dropout=false keeps the checkpoint's dropout for the update, but log pi_old and
    log pi_ref are still computed in eval mode: deterministic, equal to an eval-mode forward."""
    trainer = make_trainer(dropout_model_dir, train_data_dir / "gsm8k_train.jsonl", tmp_path, ["disable_dropout=false"])
    assert trainer.policy.config.attention_dropout == 0.5
    batch, _ = hand_made_batch()
    rows = list(range(len(batch)))
    trainer.model.train()
    first = U.log_probs_of(trainer.update_context(), trainer.model, batch, rows)
    second = U.log_probs_of(trainer.update_context(), trainer.model, batch, rows)
    assert trainer.model.training
    for i in rows:
        assert torch.equal(first[i], second[i])
    trainer.model.eval()
    reference = U.log_probs_of(trainer.update_context(), trainer.model, batch, rows)
    for i in rows:
        assert torch.allclose(first[i], reference[i], atol=1e-6)


def test_local_norm_divides_the_mini_batch_sum_of_j_local(trainer):
    """prompts: / 4 prompts (default); correct_prompts: / 3 (group 2 has no correct rollout);
    none: the plain sum of the per-prompt terms."""
    batch, shaped = hand_made_batch()
    local = {}
    for norm in ("prompts", "correct_prompts", "none"):
        trainer.cfg = trainer.cfg.replace(loss_agg_mode="seq-mean-token-mean", micro_batch_size=3,
                                          local_term=True, lambda_l=0.5, use_kl=False, kl_coef=0.0,
                                          loss_norm_constant=None, local_norm=norm)
        local[norm] = update_and_capture(trainer, batch, shaped)[0]["loss/local"]
    assert local["prompts"] != 0
    assert local["correct_prompts"] == pytest.approx(local["prompts"] * 4 / 3, rel=1e-6)
    assert local["none"] == pytest.approx(local["prompts"] * 4, rel=1e-6)
