"""End-to-end trainer tests on the tiny random Llama (CPU): every algorithm trains 2 steps with
finite losses and exact metrics keys; group ids are per prompt even across DAPO generation
batches; checkpoints reload and `dsdr-eval run` evaluates them; a kill -9 run resumes without
duplicated steps."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from dsdr_train import scoring
from dsdr_train import train as T
from dsdr_train.core_algos import ALGO_DEFAULTS

# slow: every test here trains the tiny Llama (3-22 s each on 2 shared cores) or loads MiniLM
pytestmark = pytest.mark.slow

# The metrics.jsonl keys agreed in the project brief (validation keys only when validation ran).
METRIC_KEYS = set("""step time/total_s time/generate_s time/reward_s time/update_s reward/mean reward/std
acc/mean shaped_reward/mean shaped_reward/std bonus/mean entropy/mean diversity/semantic diversity/formula
similarity/semantic similarity/formula response_length/mean response_length/max response_length/clip_ratio
loss/pg loss/local loss/kl loss/total clip/frac clip/frac_low clip/frac_high kl/approx adv/mean adv/std adv/min
adv/max groups/all_correct_frac groups/all_wrong_frac dapo/num_gen_batches lr""".split())
COUPLING_KEYS = {"coupling/max", "coupling/entropy"}  # only objectives with the local term (Eq. 12-13)

TINY = ["group_size=2", "prompts_per_step=2", "mini_batch_prompts=1", "micro_batch_size=4",
        "max_response_length=6", "generation_batch_size=8", "max_num_gen_batches=2", "progress=false",
        "lr=1e-3", "max_prompt_length=512"]


def fake_grade(batch, problems, cfg):
    """Deterministic mixed verdicts so every objective sees non-zero advantages (the random tiny
    model never answers correctly): rollout k of a group is correct iff k is even."""
    seen: dict[int, int] = {}
    rows = []
    for g in batch.group_ids:
        k = seen.get(g, 0)
        seen[g] = k + 1
        rows.append({"correct": k % 2 == 0, "answer_class": k % 2, "status": "correct" if k % 2 == 0 else "incorrect"})
    return rows


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def train_file(train_data_dir) -> Path:
    return train_data_dir / "gsm8k_train.jsonl"


def run_cli(args: list[str]) -> int:
    from dsdr_train.cli import main

    return main(args)


@pytest.mark.parametrize("algo", sorted(ALGO_DEFAULTS))
def test_every_algorithm_trains_two_steps(algo, tiny_model_dir, train_file, tmp_path, monkeypatch):
    monkeypatch.setattr(scoring, "grade", fake_grade)
    before = {k: v.clone() for k, v in _load_state(tiny_model_dir).items()}
    out = tmp_path / algo
    assert run_cli(["--algo", algo, "--model", str(tiny_model_dir), "--train-data", str(train_file),
                    "--out", str(out), "--threads", "1", "total_steps=2", "save_every=1", *TINY]) == 0
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert set(r) == METRIC_KEYS | (COUPLING_KEYS if ALGO_DEFAULTS[algo]["local_term"] else set())
        for key in ("loss/pg", "loss/local", "loss/kl", "loss/total", "entropy/mean"):
            assert math.isfinite(r[key]), (key, r[key])
        assert r["acc/mean"] == 0.5 and r["adv/std"] > 0  # the fake verdicts give signal
        assert r["entropy/mean"] > 0
    config = json.loads((out / "config.json").read_text())
    assert config["kind"] == "train" and config["algo"] == algo and config["config"]["algo"] == algo
    assert "versions" in config
    assert config["threads"]["torch"] == 1 and config["threads"]["source"] == "--threads"  # issue 46 item 1
    # The objective acted on the weights, and the HF checkpoints reload.
    after = _load_state(out / "final")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    ckpt = out / "checkpoints" / "step_000002"
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    assert state["step"] == 2 and "optimizer" in state and "rng" in state
    assert not (out / "checkpoints" / "step_000000").exists()
    if algo in ("dsdr", "dsdr_wo_gd"):
        assert any(r["loss/local"] != 0 for r in rows)
    if algo in ("dsdr", "dsdr_wo_gc"):
        assert any(r["bonus/mean"] > 0 for r in rows)
    if algo == "grpo":
        assert all(r["loss/local"] == 0 and r["bonus/mean"] == 0 for r in rows)


def _load_state(path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path).state_dict()


def test_group_ids_are_per_prompt_across_dapo_generation_batches(tiny_model_dir, train_file, tmp_path, monkeypatch):
    """Every rollout of a prompt shares one group id and no other rollout does, also when DAPO's
    dynamic sampling concatenates several generation batches (here: the first batch's groups are
    all filtered out, so a second batch is drawn and concatenated)."""
    from dsdr_train.config import config_from_sources, parse_overrides

    calls: list[list[int]] = []

    def grade_first_batch_all_wrong(batch, problems, cfg):
        calls.append(list(batch.group_ids))
        if len(calls) == 1:
            return [{"correct": False, "answer_class": None, "status": "incorrect"} for _ in batch.group_ids]
        return fake_grade(batch, problems, cfg)

    monkeypatch.setattr(scoring, "grade", grade_first_batch_all_wrong)
    cfg = config_from_sources(yaml_path=None, cli={"algo": "dapo", "model": str(tiny_model_dir),
                                                   "train_data": str(train_file), "out": str(tmp_path)},
                              overrides=parse_overrides([*TINY, "group_size=3", "prompts_per_step=2", "max_num_gen_batches=3"]))
    trainer = T.Trainer(cfg, model_path=str(tiny_model_dir), run_dir=tmp_path)
    collected = trainer.collect()
    batch, graded, acc = collected.batch, collected.graded, collected.accuracy
    assert collected.stats.metrics()["dapo/num_gen_batches"] == 2
    assert len(calls) == 2 and not set(calls[0]) & set(calls[1])  # no id reused across batches
    assert set(batch.group_ids) <= set(calls[1])
    groups = scoring.groups_of(batch.group_ids)
    assert len(groups) == 2 and all(len(rows) == 3 for rows in groups.values())
    for rows in groups.values():
        assert len({batch.problem_idx[i] for i in rows}) == 1
        assert len({tuple(batch.prompt_ids[i]) for i in rows}) == 1
    # Different groups are different prompt draws (distinct ids even if a problem repeats).
    assert len(set(batch.group_ids)) == len(groups)
    # Advantages are computed per group: each group's advantages sum to zero.
    shaped, _ = trainer.shape(batch, graded, acc)
    for rows in groups.values():
        assert abs(float(shaped.advantages[rows].sum())) < 1e-5


def test_real_grading_run_then_dsdr_eval_evaluates_the_checkpoint(tiny_model_dir, train_file, data_dir, tmp_path):
    """Real verifier (dsdr_eval.grading) and real subprocess CLI; then `dsdr-eval run` on final/."""
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, "-m", "dsdr_train.cli", "--algo", "grpo", "--model", str(tiny_model_dir),
                           "--train-data", str(train_file), "--out", str(out), "total_steps=2", "save_every=0", *TINY,
                           f"val_data={data_dir / 'math500.jsonl'}", "val_max_problems=2", "val_n=2", "val_max_tokens=6"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2] and all(math.isfinite(r["loss/total"]) for r in rows)
    # Validation runs at the end (val_every=0): the val keys appear on the last step only.
    assert set(rows[1]) == METRIC_KEYS | {"val/acc", "val/pass@1", "val/avg@2"} and set(rows[0]) == METRIC_KEYS
    assert all(0.0 <= rows[1][k] <= 1.0 for k in ("val/acc", "val/pass@1", "val/avg@2"))
    assert (out / "final" / "config.json").exists() and (out / "final" / "tokenizer_config.json").exists()
    ev = tmp_path / "eval"
    proc = subprocess.run([sys.executable, "-m", "dsdr_eval.cli", "run", "--model", str(out / "final"),
                           "--benchmarks", "math500", "--data-dir", str(data_dir), "--limit", "2",
                           "--protocol", "quick", "--n", "2", "--max-tokens", "8", "--backend", "hf",
                           "--out", str(ev), "--no-progress", "--no-diversity"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((ev / "metrics.json").read_text())
    assert metrics["benchmarks"]["math500"]["n_problems"] == 2


def test_kill_9_then_resume_continues_without_duplicate_steps(tiny_model_dir, train_file, tmp_path):
    out = tmp_path / "run"
    base = [sys.executable, "-m", "dsdr_train.cli"]
    args = ["--algo", "grpo", "--model", str(tiny_model_dir), "--train-data", str(train_file), "--out", str(out),
            "total_steps=5", "save_every=2", "keep_last=0", *TINY]
    proc = subprocess.Popen(base + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 300
    try:
        # Kill after step 3 is logged: the last checkpoint is step 2, so step 3 must be redone once.
        while time.time() < deadline:
            metrics = out / "metrics.jsonl"
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
                break
            if proc.poll() is not None:
                pytest.fail(f"trainer exited early: {proc.stderr.read()[-3000:]}")
            time.sleep(0.2)
        else:
            pytest.fail("trainer did not reach step 3 in time")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.stderr.close()
    steps_before = [r["step"] for r in read_metrics(out)]
    assert steps_before[:3] == [1, 2, 3] and not (out / "final").exists()
    # A fresh start into the same directory is refused (no silent overwrite).
    refused = subprocess.run(base + args, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    resumed = subprocess.run(base + ["--resume", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "at step" in resumed.stderr
    steps = [r["step"] for r in read_metrics(out)]
    assert steps == [1, 2, 3, 4, 5]
    assert (out / "final" / "config.json").exists()
    state = torch.load(out / "checkpoints" / "step_000004" / "trainer_state.pt", weights_only=False)
    assert state["step"] == 4 and state["sampler"]["cursor"] == 4 * 2  # 2 prompts per step, no re-draws


def test_resume_reads_the_trainer_state_once(tiny_model_dir, train_file, tmp_path, monkeypatch):
    """trainer_state.pt (optimizer state included) is loaded once per resume, not once by the CLI
    for the step and again by the trainer for the state."""
    monkeypatch.setattr(scoring, "grade", fake_grade)
    out = tmp_path / "run"
    assert run_cli(["--algo", "grpo", "--model", str(tiny_model_dir), "--train-data", str(train_file), "--out", str(out),
                    "total_steps=1", "save_every=1", "save_final=false", "log_diversity=false", *TINY]) == 0
    loads: list[str] = []
    real_load = torch.load

    def counting_load(f, *args, **kwargs):
        if str(f).endswith("trainer_state.pt"):
            loads.append(str(f))
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting_load)
    assert run_cli(["--resume", "--out", str(out), "total_steps=2"]) == 0
    assert len(loads) == 1, loads
    assert [r["step"] for r in read_metrics(out)] == [1, 2]


def test_dapo_exhausted_error_stops_with_one_line_and_keeps_the_trained_steps(tiny_model_dir, train_file, tmp_path,
                                                                              monkeypatch, capsys):
    """dapo_exhausted=error (verl's behaviour): when max_num_gen_batches cannot fill the batch the run
    stops with exit code 2 and a one-line error, after saving the steps already trained."""
    calls = []

    def mixed_then_all_wrong(batch, problems, cfg):
        calls.append(1)
        if len(calls) == 1:
            return fake_grade(batch, problems, cfg)
        return [{"correct": False, "answer_class": None, "status": "incorrect"} for _ in batch.group_ids]

    monkeypatch.setattr(scoring, "grade", mixed_then_all_wrong)
    out = tmp_path / "exhausted"
    code = run_cli(["--algo", "dapo", "--model", str(tiny_model_dir), "--train-data", str(train_file), "--out", str(out),
                    "total_steps=3", "save_every=0", "dapo_exhausted=error", "log_diversity=false", *TINY])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and err.startswith("dsdr-train: error: config key 'max_num_gen_batches'") and "step 2" in err
    assert [r["step"] for r in read_metrics(out)] == [1]
    assert (out / "checkpoints" / "step_000001" / "trainer_state.pt").exists()
    assert len(calls) == 3  # step 1, then the 2 generation batches of step 2


def test_encoder_settings_and_open_choices_are_recorded(tiny_model_dir, train_file, tmp_path):
    from dsdr_train.cli import main

    out = tmp_path / "record"
    assert main(["--algo", "dsdr", "--model", str(tiny_model_dir), "--train-data", str(train_file), "--out", str(out),
                 "total_steps=1", "save_every=0", "save_final=false", "encoder_chunked=true",
                 "encoder_max_seq_length=32", "formula_rules=diver", *TINY]) == 0
    record = json.loads((out / "config.json").read_text())
    assert record["config"]["encoder_chunked"] is True and record["config"]["encoder_max_seq_length"] == 32
    assert record["encoder"]["truncation"] == "chunk-mean" and record["encoder"]["max_seq_length"] == 32
    assert record["encoder"]["chunk_tokens"] == 30
    from dsdr_eval.diversity_metrics import EXTRACTION_RULES

    assert record["config"]["formula_rules"] == "diver" and record["formula_extraction"] == EXTRACTION_RULES["diver"]
    for key in ("singleton_advantage", "local_norm", "dapo_exhausted"):
        assert key in record["config"] and key in record["objective_notes"]


def test_encoder_max_seq_length_truncates_without_touching_the_shared_model():
    from dsdr_eval.diversity_metrics import load_encoder

    default = load_encoder()
    short = load_encoder(max_seq_length=16)
    assert short.model is default.model  # one cached model
    words = " ".join(f"word{i}" for i in range(200))
    cut = short.model.tokenizer.convert_tokens_to_string(short.model.tokenizer.tokenize(words)[:14])
    assert np.allclose(short.encode([words]), default.encode([cut]), atol=1e-5)
    assert not np.allclose(default.encode([words]), short.encode([words]), atol=1e-3)
    assert default.model.max_seq_length == default.max_seq_length == 256


def test_formula_rules_reach_the_trainers_diversity():
    from dsdr_eval.diversity_metrics import load_encoder
    from dsdr_train.rollout import RolloutBatch

    batch = RolloutBatch(texts=["\\begin{align} x &= 1 \\end{align} so $y$", "so $y$"], group_ids=[0, 0])
    encoder = load_encoder()
    _, d_eq_extended, _ = scoring.group_diversity(batch, [{}, {}], encoder, "extended")
    _, d_eq_diver, _ = scoring.group_diversity(batch, [{}, {}], encoder, "diver")
    assert list(d_eq_extended) == [0.5, 0.0] and list(d_eq_diver) == [0.0, 0.0]
