"""Worker of tests/train/test_trl_engine_groups.py, run under `accelerate launch` (one process per
rank) or plainly (one process): builds the TRL engine on the given config, injects the fixed
rollouts, scores one generation batch and writes this process's rows (problem, completion ids,
advantage, coupling weight) to OUT/rank{R}.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

# run as a script: the repository (dsdr_train) and tests/ (the helpers package) on the path
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]


def main(model_dir: str, train_file: str, out: str) -> None:
    from dsdr_train.config import resolve_config
    from dsdr_train.integrations.trl.run import build_trainer
    from helpers.trl_engine_helpers import inject

    run = Path(out) / "run"
    cfg = resolve_config(dict(algo="dsdr", model=model_dir, train_data=train_file, out=str(run), group_size=2,
                              prompts_per_step=3, mini_batch_prompts=3, micro_batch_size=3, max_response_length=16,
                              max_prompt_length=512, max_train_examples=3, progress=False, save_every=0,
                              grade_workers=1))
    trainer = build_trainer(cfg, model_path=model_dir, run_dir=run)
    inject(trainer)
    trainer.model.train()
    chunks = []
    for k in range(trainer.args.steps_per_generation):
        trainer._step = k
        chunks.append(trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())) if k == 0 else None))
    prompt_index = {tuple(ids): i for i, ids in enumerate(trainer.setup.prompt_ids.values())}
    rows = []
    for c in chunks:
        for r in range(len(c["advantages"])):
            rows.append({"problem": prompt_index[tuple(c["prompt_ids"][r][c["prompt_mask"][r].bool()].tolist())],
                         "completion": c["completion_ids"][r][c["completion_mask"][r].bool()].tolist(),
                         "group": int(c["dsdr_group_ids"][r]), "advantage": float(c["advantages"][r]),
                         "weight": float(c["dsdr_weights"][r]), "divisors": c["dsdr_divisors"]["local"]})
    rank = trainer.accelerator.process_index
    Path(out, f"rank{rank}.json").write_text(json.dumps({"world": trainer.accelerator.num_processes, "rows": rows}))
    trainer.accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(*sys.argv[1:4])
