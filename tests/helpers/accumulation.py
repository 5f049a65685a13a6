"""The hand-made update batch shared by the gradient-accumulation tests and their two-process worker
(tests/train/test_train_accumulation.py, tests/helpers/ddp_grad_worker.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from dsdr_train import core_algos as algos
from dsdr_train import train as T
from dsdr_train.config import config_from_sources, parse_overrides
from dsdr_train.rollout import RolloutBatch
from dsdr_train.stats import step_metrics

# 4 prompts x G=2 with unequal response lengths; micro_batch_size=3 gives micro-batches of 3, 3, 2
# rollouts with different token counts and padded widths.
LENGTHS = [1, 7, 2, 8, 3, 3, 5, 1]
ADVANTAGES = [1.0, -1.0, 0.5, -0.5, 1.0, -1.0, -1.0, 1.0]
WEIGHTS = [1.0, 0.0, 0.3, 0.7, 0.0, 0.0, 0.5, 0.5]  # coupling weights: group 2 has no correct rollout
MAX_RESPONSE = 16  # > every padded width, so the Dr.GRPO constant differs from any padded width
BASE = ["group_size=2", "prompts_per_step=4", "mini_batch_prompts=4", f"max_response_length={MAX_RESPONSE}",
        "max_grad_norm=0", "progress=false", "log_diversity=false", "max_prompt_length=512", "max_train_examples=8"]


def make_trainer(model_dir: Path, train_file: Path, run_dir: Path, overrides: list[str]) -> T.Trainer:
    cfg = config_from_sources(yaml_path=None, cli={"algo": "grpo", "model": str(model_dir), "train_data": str(train_file),
                                                   "out": str(run_dir)}, overrides=parse_overrides([*BASE, *overrides]))
    return T.Trainer(cfg, model_path=str(model_dir), run_dir=run_dir)


def hand_made_batch(rows: range | list[int] = range(len(LENGTHS))) -> tuple[RolloutBatch, algos.ShapedRewards]:
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 1000, (3 + i % 3,), generator=gen).tolist() for i in range(len(LENGTHS))]
    responses = [torch.randint(5, 1000, (n,), generator=gen).tolist() for n in LENGTHS]
    batch = RolloutBatch()
    for i in rows:
        batch.prompt_ids.append(prompts[i])
        batch.response_ids.append(responses[i])
        batch.texts.append("")
        batch.finish_reasons.append("stop")
        batch.group_ids.append(i // 2)
        batch.problem_idx.append(i // 2)
    unused = torch.zeros(len(batch), dtype=torch.float64)  # rewards: the update reads advantages and weights
    shaped = algos.ShapedRewards(reward=unused, shaped=unused, advantages=torch.tensor([ADVANTAGES[i] for i in rows]),
                                 weights=torch.tensor([WEIGHTS[i] for i in rows], dtype=torch.float64))
    return batch, shaped


def update_and_capture(trainer: T.Trainer, batch: RolloutBatch, shaped: algos.ShapedRewards
                       ) -> tuple[dict[str, float], torch.Tensor]:
    """Run Trainer.update with the optimizer step replaced by a capture of the gradient."""
    grads: list[torch.Tensor] = []
    trainer.optimizer.step = lambda: grads.append(  # type: ignore[method-assign]
        torch.cat([p.grad.flatten() for p in trainer.policy.parameters() if p.grad is not None]).clone())
    metrics = step_metrics(trainer.dist, trainer.update(batch, shaped))  # reduced over ranks
    assert len(grads) == 1
    return metrics, grads[0]
