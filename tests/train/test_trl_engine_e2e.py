"""`dsdr-train --engine trl` end to end (CPU, tiny random Llama, real grading): the run directory
contract (config.json with engine trl and versions, metrics.jsonl with the compact trainer's keys,
checkpoints/, final/), kill -9 then --resume without duplicated steps, `dsdr-eval run` on final/;
the shipped accelerate configs parse with accelerate's own loader (no DeepSpeed needed)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "dsdr_train" / "configs" / "accelerate"
TINY = ["group_size=2", "prompts_per_step=2", "mini_batch_prompts=1", "micro_batch_size=2",
        "max_response_length=6", "max_prompt_length=512", "progress=false", "lr=1e-3"]


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_trl_run_killed_resumed_then_evaluated(tiny_model_dir, train_data_dir, data_dir, tmp_path):
    from tests.train.test_train_e2e import COUPLING_KEYS, METRIC_KEYS

    out = tmp_path / "run"
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    base = [sys.executable, "-m", "dsdr_train.cli"]
    args = ["--engine", "trl", "--algo", "dsdr", "--model", str(tiny_model_dir), "--train-data",
            str(train_data_dir / "gsm8k_train.jsonl"), "--out", str(out), "total_steps=3", "save_every=1",
            "keep_last=0", *TINY]
    proc = subprocess.Popen(base + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)
    try:  # kill -9 once step 2 is logged; its checkpoint may or may not be complete
        deadline = time.time() + 400
        while time.time() < deadline:
            if (out / "metrics.jsonl").exists() and len(_metrics(out)) >= 2:
                break
            if proc.poll() is not None:
                pytest.fail(f"trainer exited early: {proc.stderr.read().decode()[-3000:]}")
            time.sleep(0.2)
        else:
            pytest.fail("trainer did not reach step 2 in time")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.stderr.close()
    assert not (out / "final").exists()
    resumed = subprocess.run(base + ["--resume", "--out", str(out)], capture_output=True, text=True, env=env,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "at step" in resumed.stderr
    rows = _metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert set(r) == METRIC_KEYS | COUPLING_KEYS  # dsdr: the local term's coupling weights are logged
        assert all(math.isfinite(r[k]) for k in ("loss/pg", "loss/local", "loss/total", "entropy/mean"))
    config = json.loads((out / "config.json").read_text())
    assert config["engine"] == "trl" and config["kind"] == "train" and config["config"]["engine"] == "trl"
    assert set(config["engine_versions"]) == {"trl", "transformers", "accelerate", "torch"}
    # TRL names a checkpoint by its optimizer update: 2 updates per step here (2 mini-batches)
    assert sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4",
                                                                                   "checkpoint-6"]
    ev = tmp_path / "eval"
    proc = subprocess.run([sys.executable, "-m", "dsdr_eval.cli", "run", "--model", str(out / "final"),
                           "--benchmarks", "math500", "--data-dir", str(data_dir), "--limit", "2",
                           "--protocol", "quick", "--n", "2", "--max-tokens", "8", "--backend", "hf",
                           "--out", str(ev), "--no-progress", "--no-diversity"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((ev / "metrics.json").read_text())["benchmarks"]["math500"]["n_problems"] == 2


@pytest.mark.parametrize("name, kind, processes", [("zero2", "DEEPSPEED", 8), ("zero3", "DEEPSPEED", 8),
                                                   ("fsdp", "FSDP", 8), ("cpu_2proc", "MULTI_GPU", 2)])
def test_shipped_accelerate_configs_parse(name, kind, processes):
    """accelerate's own config loader (what `accelerate launch --config_file` reads first);
    DeepSpeed itself is not needed to parse, only to run."""
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(CONFIGS / f"{name}.yaml"))
    assert str(config.distributed_type).split(".")[-1] == kind and config.num_processes == processes
    if name.startswith("zero"):
        assert config.deepspeed_config["zero_stage"] == int(name[-1])
        assert config.mixed_precision == "bf16"
    if name == "fsdp":
        assert config.fsdp_config["fsdp_version"] == 2


def test_bad_layout_is_a_one_line_error(tiny_model_dir, train_data_dir, tmp_path, capsys):
    from dsdr_train.cli import main

    code = main(["--engine", "trl", "--model", str(tiny_model_dir), "--train-data",
                 str(train_data_dir / "gsm8k_train.jsonl"), "--out", str(tmp_path / "r"), *TINY,
                 "micro_batch_size=3"])
    err = capsys.readouterr().err
    assert code == 2 and "micro_batch_size" in err and "Traceback" not in err


@pytest.mark.slow
def test_trl_run_on_smollm2_then_evaluated(smollm2_dir, train_data_dir, data_dir, tmp_path):
    """The real 135M policy through the TRL engine (1 step, 2 prompts x G=2, 4 tokens), its
    final/ evaluated by `dsdr-eval run`."""
    out, ev = tmp_path / "run", tmp_path / "eval"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, "-m", "dsdr_train.cli", "--engine", "trl", "--algo", "dsdr", "--model",
                           str(smollm2_dir), "--train-data", str(train_data_dir / "gsm8k_train.jsonl"), "--out",
                           str(out), "total_steps=1", "save_every=1", "max_train_examples=8", *TINY,
                           "max_response_length=4"], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["step"] for r in _metrics(out)] == [1]
    proc = subprocess.run([sys.executable, "-m", "dsdr_eval.cli", "run", "--model", str(out / "final"),
                           "--benchmarks", "math500", "--data-dir", str(data_dir), "--limit", "1",
                           "--protocol", "quick", "--n", "1", "--max-tokens", "4", "--backend", "hf",
                           "--out", str(ev), "--no-progress", "--no-diversity"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((ev / "metrics.json").read_text())["benchmarks"]["math500"]["n_problems"] == 1


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_resume_of_a_finished_trl_run_trains_nothing(tiny_model_dir, train_data_dir, tmp_path):
    """issue 24.5: `--resume` of a finished TRL run said nothing of being done and trained one more
    step each time (steps 3, 4 of total_steps=2, final/ overwritten). Now it says "done: 2 steps",
    leaves metrics.jsonl, the checkpoints and final/ byte for byte, also when the run was killed while
    final/ was written (final/ is then rebuilt from the last checkpoint, nothing trained). The
    smallest layout (2 prompts x G=2, micro_batch_size unset: the largest divisor <= 8) runs."""
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    base = [sys.executable, "-m", "dsdr_train.cli"]
    tiny = [a for a in TINY if not a.startswith(("micro_batch_size", "mini_batch_prompts"))] + ["mini_batch_prompts=2"]
    first = subprocess.run(base + ["--engine", "trl", "--algo", "grpo", "--model", str(tiny_model_dir), "--train-data",
                                   str(train_data_dir / "gsm8k_train.jsonl"), "--out", str(out), "total_steps=2",
                                   "save_every=1", "keep_last=0", *tiny], capture_output=True, text=True, env=env,
                           timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    layout = json.loads((out / "config.json").read_text())["engine_layout"]
    assert layout["micro_batch_size"] == 4 and layout["micro_batch_size_from"].startswith("default")
    metrics, final = (out / "metrics.jsonl").read_bytes(), _tree(out / "final")
    checkpoints = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert [r["step"] for r in _metrics(out)] == [1, 2]

    def resume() -> str:
        proc = subprocess.run(base + ["--resume", "--out", str(out)], capture_output=True, text=True, env=env,
                              timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "done: 2 steps" in proc.stderr, proc.stderr[-3000:]
        assert (out / "metrics.jsonl").read_bytes() == metrics
        assert sorted(p.name for p in (out / "checkpoints").iterdir()) == checkpoints
        return proc.stderr

    resume()
    assert _tree(out / "final") == final
    resume()  # twice: still nothing
    # killed while final/ was written: the rename never happened, a partial final.tmp is left
    (out / "final").rename(out / "final.tmp")
    next((out / "final.tmp").glob("*.safetensors")).unlink()
    assert "rebuilt" in resume()
    from safetensors.torch import load, load_file

    weights = load_file(next((out / "final").glob("*.safetensors")))
    before = load(next(v for k, v in final.items() if k.endswith(".safetensors")))
    assert weights.keys() == before.keys() and all(bool((weights[k] == before[k]).all()) for k in weights)
    assert not (out / "final.tmp").exists()
