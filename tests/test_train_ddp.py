"""Data-parallel path: 2 CPU processes (torchrun, gloo) train the tiny model with whole groups
per rank; rank 0 alone writes metrics/checkpoints; DAPO's resampling decision is collective."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from net_helpers import free_port


@pytest.mark.slow
def test_two_process_gloo_run(tiny_model_dir, train_data_dir, tmp_path):
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "dsdr_train.cli", "--algo", "dapo", "--model", str(tiny_model_dir),
           "--train-data", str(train_data_dir / "gsm8k_train.jsonl"), "--out", str(out),
           "total_steps=2", "group_size=2", "prompts_per_step=4", "mini_batch_prompts=2", "max_response_length=6",
           "max_num_gen_batches=2", "save_every=1", "progress=false", "device=cpu"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]  # one line per step, not one per rank
    for r in rows:
        # The random tiny model is always wrong: every group (of both ranks) is filtered, and both
        # ranks took the same decision to draw a second generation batch.
        assert r["groups/all_wrong_frac"] == 1.0 and r["dapo/num_gen_batches"] == 2
    assert (out / "final" / "config.json").exists()
    assert (out / "checkpoints" / "step_000002" / "trainer_state.pt").exists()
    assert proc.stderr.count("done: 2 steps") == 1
