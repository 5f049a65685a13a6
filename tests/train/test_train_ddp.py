"""Data-parallel path: 2 CPU processes (torchrun, gloo) train the tiny model with whole groups
per rank; rank 0 alone writes metrics/checkpoints; DAPO's resampling decision is collective; the
data-parallel gradient equals one process's on the concatenated batch, for every loss_agg_mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.net_helpers import free_port


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


@pytest.mark.slow
def test_two_process_gradient_equals_one_process_on_the_concatenated_batch(tiny_model_dir, train_data_dir, tmp_path):
    """Ranks with unequal token counts (18 vs 12): token-mean must divide by the global count
    (not average the per-rank token means), seq-mean by the global sequence count, and the loss
    must undo DDP's averaging over ranks; micro_batch_size=3 also accumulates within each rank."""
    worker = Path(__file__).resolve().parents[1] / "helpers" / "ddp_grad_worker.py"
    args = [str(tiny_model_dir), str(train_data_dir / "gsm8k_train.jsonl")]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ddp = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          str(free_port()), str(worker), *args, str(tmp_path / "ddp.pt")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert ddp.returncode == 0, ddp.stderr[-4000:]
    single = subprocess.run([sys.executable, str(worker), *args, str(tmp_path / "single.pt")],
                            capture_output=True, text=True, env=env, timeout=600)
    assert single.returncode == 0, single.stderr[-4000:]
    two, one = torch.load(tmp_path / "ddp.pt"), torch.load(tmp_path / "single.pt")
    for mode, reference in one.items():
        grad, expected = two[mode]["grad"], reference["grad"]
        assert float((grad - expected).norm() / expected.norm()) < 1e-5, mode
        for key in ("loss/pg", "loss/local", "entropy/mean", "clip/frac", "kl/approx"):
            assert two[mode]["metrics"][key] == pytest.approx(reference["metrics"][key], rel=1e-5, abs=1e-7), (mode, key)
