"""Worker of tests/train/test_trl_engine_reference_2proc.py, run under `accelerate launch` (2 processes,
gloo on CPU): TRL's own ``Trainer.train`` for one DSDR step on injected fixed rollouts, AdamW with a
large learning rate, so the second PPO epoch sees importance ratios far from 1.

At every optimizer step (a torch step pre-hook: after TRL's gradient all-reduce, before AdamW moves
the weights) it records the parameters, the gradients, and the rows (group, prompt, completion) and
the micro-batch losses each process trained on since the previous step. Each rank writes
OUT/rank{R}.pt; the test rebuilds the whole batch from both ranks and compares with the reference.

    python tests/helpers/trl_reference_worker.py MODEL_DIR TRAIN_JSONL OUT ALGO MODE
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

# run as a script: the repository (dsdr_train) and tests/ (the helpers package) on the path
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

LR = 0.03


def config(algo: str, mode: str, model_dir: str, train_file: str, run: Path):
    """3 prompts x G=4 on 2 processes: 6 rows per rank, so prompt 1's group straddles the ranks;
    one mini-batch of 3 prompts x 2 PPO epochs (the second epoch is off-policy)."""
    from dsdr_train.config import resolve_config

    extra = {"loss_agg_mode": mode} if mode != "default" else {}
    if algo in ("dsdr", "dsdr_wo_gc"):
        extra["lambda_d"] = 0.3
    if algo in ("dsdr", "dsdr_wo_gd"):
        extra["lambda_l"] = 0.5
    return resolve_config(dict(algo=algo, model=model_dir, train_data=train_file, out=str(run), group_size=4,
                               prompts_per_step=3, mini_batch_prompts=3, micro_batch_size=3, ppo_epochs=2,
                               max_response_length=16, max_prompt_length=512, max_train_examples=3, temperature=0.8,
                               max_grad_norm=0.0, progress=False, save_every=0, lr=LR, total_steps=1,
                               warmup_steps=0, weight_decay=0.0, grade_workers=1, **extra))


def main(model_dir: str, train_file: str, out: str, algo: str, mode: str) -> None:
    import dsdr_train.integrations.trl.trainer as trl_trainer
    from dsdr_train.integrations.trl.run import build_trainer
    from helpers.trl_engine_helpers import inject

    run = Path(out) / f"run{algo}"
    cfg = config(algo, mode, model_dir, train_file, run)
    trainer = build_trainer(cfg, model_path=model_dir, run_dir=run)
    inject(trainer)
    pending: dict[str, list] = {"rows": [], "losses": [], "returned": []}
    updates: list[dict] = []
    original_loss = trl_trainer.micro_batch_loss

    def recording_loss(objective, log_probs, old, advantages, mask, weights, divisors, **kw):
        terms = original_loss(objective, log_probs, old, advantages, mask, weights, divisors, **kw)
        pending["losses"].append(float(terms.total.detach()))
        return terms

    trl_trainer.micro_batch_loss = recording_loss
    original_compute = trainer._compute_loss

    def recording_compute(model, inputs):
        for r in range(len(inputs["advantages"])):
            pending["rows"].append((int(inputs["dsdr_group_ids"][r]), bool(inputs["dsdr_keep"][r]),
                                    inputs["prompt_ids"][r][inputs["prompt_mask"][r].bool()].tolist(),
                                    inputs["completion_ids"][r][inputs["completion_mask"][r].bool()].tolist()))
        loss = original_compute(model, inputs)
        pending["returned"].append(float(loss.detach()))
        return loss

    trainer._compute_loss = recording_compute
    params = list(trainer.model.parameters())

    def before_step(optimizer, *_):
        updates.append({"params": [p.detach().clone() for p in params],
                        "grads": [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in params],
                        **{k: list(v) for k, v in pending.items()}})
        for v in pending.values():
            v.clear()

    handle = register_optimizer_step_pre_hook(before_step)
    trainer.train()
    handle.remove()
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    torch.save({"world": world, "updates": updates}, Path(out) / f"rank{rank}.pt")
    trainer.accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(*sys.argv[1:6])
