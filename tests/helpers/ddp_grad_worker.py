"""Worker of tests/train/test_train_ddp.py: Trainer.update on the hand-made batch of
test_train_accumulation, once per loss_agg_mode (with the DSDR local term), gradient captured.

Launched by torchrun, each rank takes its contiguous share of the groups (rank 0: 18 response
tokens, rank 1: 12); launched as a plain script, one process takes the whole batch. Rank 0 saves
{mode: {"grad": [P], "metrics": {...}}} to the path given as the third argument.

    python tests/helpers/ddp_grad_worker.py MODEL_DIR TRAIN_JSONL OUT.pt
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from dsdr_train.core_algos import LOSS_AGG_MODES
# run as a script: tests/ on the path for the helpers package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.accumulation import LENGTHS, MAX_RESPONSE, hand_made_batch, make_trainer, update_and_capture  # noqa: E402


def main(model_dir: str, train_file: str, out: str) -> None:
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    run_dir = Path(out).with_suffix("") / f"rank{rank}"
    trainer = make_trainer(Path(model_dir), Path(train_file), run_dir, ["micro_batch_size=3", "device=cpu"])
    share = len(LENGTHS) // world
    batch, shaped = hand_made_batch(list(range(rank * share, (rank + 1) * share)))
    results = {}
    for mode in LOSS_AGG_MODES:
        trainer.cfg = trainer.cfg.replace(loss_agg_mode=mode, local_term=True, lambda_l=0.5,
                                          loss_norm_constant=MAX_RESPONSE if mode == "seq-mean-token-sum-norm" else None)
        metrics, grad = update_and_capture(trainer, batch, shaped)
        results[mode] = {"grad": grad, "metrics": metrics}
    if rank == 0:
        torch.save(results, out)
    if world > 1:
        import torch.distributed as tdist

        tdist.barrier()
        tdist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
