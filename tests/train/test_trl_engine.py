"""The TRL engine trains the SAME objective as the compact trainer: on one fixed batch (tiny random
Llama, fixed rollouts injected instead of generated, really graded), TRL's advantages, coupling
weights, loss terms and every parameter gradient of every optimizer update equal the compact
trainer's, for every algorithm (fp32, rel tol 1e-5 on gradients)."""

from __future__ import annotations

import pytest
import torch

from dsdr_train.core_algos import ALGO_DEFAULTS
from helpers.trl_engine_helpers import batch_from_trl, compact_update, inject

# slow: every test trains the tiny Llama with both engines (12-26 s each on 2 shared cores)
pytestmark = pytest.mark.slow

pytest.importorskip("trl")

# DAPO: one mini-batch per step (its masked groups leave the compact trainer's mini-batches
# differently composed otherwise); the others: 2 mini-batches x 2 micro-batches (old log-probs,
# the group shuffle and the whole-mini-batch divisors all matter).
LAYOUT = {"dapo": {"mini_batch_prompts": 4, "micro_batch_size": 4}}


def _config(algo: str, model_dir, train_file, out, **extra):
    from dsdr_train.config import resolve_config

    values = dict(algo=algo, model=str(model_dir), train_data=str(train_file), out=str(out), group_size=4,
                  prompts_per_step=4, mini_batch_prompts=2, micro_batch_size=4, max_response_length=16,
                  max_prompt_length=512, max_train_examples=4, temperature=0.8, max_grad_norm=0.0, progress=False,
                  save_every=0, lr=1e-3)
    values.update(LAYOUT.get(algo, {}), **extra)
    return resolve_config(values)


def _trl_updates(trainer):
    """Drive TRL's own training_step over one generation batch: per optimizer update, the
    accumulated gradients; and the chunks TRL trained on."""
    model = trainer.model
    model.train()
    generation_batch = next(iter(trainer.get_train_dataloader()))
    geo = trainer.setup.geometry
    trainer.current_gradient_accumulation_steps = geo.grad_accum  # set by Trainer's loop otherwise
    grads = []
    for _ in range(geo.mini_batches * trainer.setup.cfg.ppo_epochs):
        model.zero_grad(set_to_none=True)
        for _ in range(geo.grad_accum):
            trainer.training_step(model, generation_batch, None)
        grads.append([p.grad.detach().clone() for p in model.parameters()])
    return grads, trainer._buffered_inputs


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


@pytest.mark.parametrize("algo", sorted(ALGO_DEFAULTS))
def test_trl_engine_matches_the_compact_trainer(algo, tiny_model_dir, train_data_dir, tmp_path):
    from dsdr_train.integrations.trl.run import build_trainer

    cfg = _config(algo, tiny_model_dir, train_data_dir / "gsm8k_train.jsonl", tmp_path / "run")
    trainer = build_trainer(cfg, model_path=str(tiny_model_dir), run_dir=tmp_path / "run")
    inject(trainer)
    trl_grads, chunks = _trl_updates(trainer)
    record = trainer._record.update

    batch = batch_from_trl(trainer, chunks)
    from dsdr_train import scoring

    graded = scoring.grade(batch, trainer.setup.problems, cfg)
    acc = torch.tensor([float(r["correct"]) for r in graded])
    assert 0 < float(acc.mean()) < 1
    compact_batch, compact_graded = batch, graded
    if cfg.objective.dynamic_sampling:  # the compact trainer drops the zero-variance groups (§2)
        from dsdr_train.core_algos import dapo_keep_groups

        keep = dapo_keep_groups(acc, torch.tensor(batch.group_ids)).nonzero().flatten().tolist()
        assert 0 < len(keep) < len(batch)
        compact_batch, compact_graded = batch.select(keep), [graded[i] for i in keep]
    stats, compact_grads, shaped = compact_update(cfg, tiny_model_dir, compact_batch, trainer.setup.diversity, compact_graded,
                                                  trainer.processing_class.pad_token_id)

    # advantages and coupling weights, rollout by rollout (Eq. 1, 11, 12, 16, 17)
    by_key = {}
    for c in chunks:
        for r in range(len(c["advantages"])):
            o = tuple(c["completion_ids"][r][c["completion_mask"][r].bool()].tolist())
            by_key[(c["dsdr_group_ids"][r], o)] = (float(c["advantages"][r]), float(c["dsdr_weights"][r]))
    for i in range(len(compact_batch)):
        adv, w = by_key[(compact_batch.group_ids[i], tuple(compact_batch.response_ids[i]))]
        assert adv == pytest.approx(float(shaped.advantages[i]), rel=1e-9, abs=1e-12)
        assert w == pytest.approx(float(shaped.weights[i]), rel=1e-9, abs=1e-12)

    # loss terms (means over the step's updates, as metrics.jsonl logs them)
    for key, value in (("loss/pg", stats.loss_pg), ("loss/local", stats.loss_local), ("loss/kl", stats.loss_kl)):
        assert record.get(key, 0.0) == pytest.approx(value, rel=1e-5, abs=1e-9), key
    if cfg.objective.local_term:
        assert stats.loss_local != 0.0

    # every parameter's gradient, update by update
    assert len(trl_grads) == len(compact_grads)
    for u, (mine, ref) in enumerate(zip(trl_grads, compact_grads)):
        assert len(mine) == len(ref)
        worst = max(_rel(a, b) for a, b in zip(mine, ref) if b.norm() > 0)
        assert worst < 1e-5, (algo, u, worst)


def test_trl_engine_kl_term_matches(tiny_model_dir, train_data_dir, tmp_path):
    """With the optional KL penalty (§1, Eq. 5) TRL's reference log-probs feed core_algos' k3."""
    from dsdr_train.integrations.trl.run import build_trainer

    cfg = _config("grpo", tiny_model_dir, train_data_dir / "gsm8k_train.jsonl", tmp_path / "run", kl_coef=0.05)
    trainer = build_trainer(cfg, model_path=str(tiny_model_dir), run_dir=tmp_path / "run")
    inject(trainer)
    trl_grads, chunks = _trl_updates(trainer)
    batch = batch_from_trl(trainer, chunks)
    from dsdr_train import scoring

    graded = scoring.grade(batch, trainer.setup.problems, cfg)
    stats, compact_grads, _ = compact_update(cfg, tiny_model_dir, batch, trainer.setup.diversity, graded,
                                             trainer.processing_class.pad_token_id)
    assert trainer._record.update["loss/kl"] == pytest.approx(stats.loss_kl, rel=1e-5)
    for mine, ref in zip(trl_grads, compact_grads):
        assert max(_rel(a, b) for a, b in zip(mine, ref) if b.norm() > 0) < 1e-5
