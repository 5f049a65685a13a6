"""The TRL engine's loss gradients equal the independent reference of docs/ALGORITHMS.md
(tests/helpers/spec_reference.py, nothing from dsdr_train.core_algos) at every optimizer update of a real
TRL step: fixed rollouts injected, really graded, AdamW steps taken between the updates with a large
learning rate, so the later updates see importance ratios far from 1 (both clip sides active).

The reference starts from the verifier verdicts and the diversity scores (d_i of Eq. 9, Div of
Eq. 15: the encoder is the engines' dsdr_train.scoring); everything after them (Eq. 1-6, 10-14, 16-17)
is recomputed from the equations."""

from __future__ import annotations

import pytest
import torch

from helpers import spec_reference as R
from helpers.trl_engine_helpers import batch_from_trl, inject, reference_shaping
from tests.train.test_trl_engine import _config

pytest.importorskip("trl")

LR = 0.03


def _trl_real_updates(trainer):
    """TRL's own training_step over one generation batch with an AdamW step after each update:
    per update, the parameters before it, its accumulated gradients and the micro-batches it used."""
    model = trainer.model
    model.train()
    generation_batch = next(iter(trainer.get_train_dataloader()))
    geo = trainer.setup.geometry
    trainer.current_gradient_accumulation_steps = geo.grad_accum
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    updates = []
    for u in range(geo.mini_batches * trainer.setup.cfg.ppo_epochs):
        before = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.zero_grad(set_to_none=True)
        chunks = []
        for _ in range(geo.grad_accum):
            chunks.append(trainer._step % geo.steps_per_generation)
            trainer.training_step(model, generation_batch, None)
        grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
        updates.append((before, grads, chunks))
        optimizer.step()
    return updates, trainer._buffered_inputs


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "mode"), [("dsdr", None), ("dsdr", "seq-mean-token-sum-norm"), ("dapo", None),
                                           ("darling", None)])
def test_trl_engine_gradients_equal_the_reference(algo, mode, tiny_model_dir, train_data_dir, tmp_path):
    from dsdr_train.integrations.trl.run import build_trainer

    s = R.spec(algo)
    extra = {k: v for k, v in (("lambda_d", s.bonus), ("lambda_l", s.lambda_l), ("loss_agg_mode", mode)) if v}
    if algo == "dapo":  # its layout has one mini-batch per step: a second PPO epoch is the off-policy update
        extra["ppo_epochs"] = 2
    cfg = _config(algo, tiny_model_dir, train_data_dir / "gsm8k_train.jsonl", tmp_path / "run", lr=LR, **extra)
    trainer = build_trainer(cfg, model_path=str(tiny_model_dir), run_dir=tmp_path / "run")
    inject(trainer)
    initial = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    updates, chunks = _trl_real_updates(trainer)

    batch = batch_from_trl(trainer, chunks)  # whole groups, TRL's generation order
    acc, advantages, weights, kept = reference_shaping(s, batch, trainer, cfg)
    index = {(g, tuple(o)): i for i, (g, o) in enumerate(zip(batch.group_ids, batch.response_ids))}

    reference = type(trainer.model).from_pretrained(str(tiny_model_dir)).eval()
    reference.load_state_dict(initial)
    with torch.no_grad():
        old = [R.token_log_probs(reference, p, o, cfg.temperature) for p, o in zip(batch.prompt_ids, batch.response_ids)]
    worst_grad, ratio_min, ratio_max = 0.0, float("inf"), 0.0
    for before, grads, used in updates:
        rows = []
        for c in used:
            chunk = chunks[c]
            for r in range(len(chunk["advantages"])):
                o = tuple(chunk["completion_ids"][r][chunk["completion_mask"][r].bool()].tolist())
                i = index[(chunk["dsdr_group_ids"][r], o)]
                if batch.group_ids[i] in kept:
                    rows.append(i)
        reference.load_state_dict(before)
        params = list(reference.parameters())
        logp = [R.token_log_probs(reference, batch.prompt_ids[i], batch.response_ids[i], cfg.temperature) for i in rows]
        loss = R.mini_batch_loss(s, cfg.objective.loss_agg_mode, logp, [old[i] for i in rows],
                                 [advantages[i] for i in rows], [weights[i] for i in rows], [acc[i] for i in rows],
                                 n_prompts=len({batch.group_ids[i] for i in rows}), max_len=cfg.max_response_length)
        ref_grads = torch.autograd.grad(loss, params, allow_unused=True)
        ref_flat = torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(ref_grads, params)])
        ours = torch.cat([g.flatten() for g in grads])
        worst_grad = max(worst_grad, float((ours - ref_flat).norm() / ref_flat.norm()))
        with torch.no_grad():
            for k, i in enumerate(rows):
                ratio = torch.exp(logp[k] - old[i])
                ratio_min, ratio_max = min(ratio_min, float(ratio.min())), max(ratio_max, float(ratio.max()))
    assert worst_grad < 1e-4, (algo, worst_grad, ratio_min, ratio_max)
    assert ratio_max > 1.5 and ratio_min < 0.7, (ratio_min, ratio_max)
