"""`dsdr-eval run` end to end on the tiny model (HF backend): kill -9 mid-run, rerun, compare.

The rerun must generate only what is missing (no sample lost or doubled) and end with the same
samples and metrics as an uninterrupted run of the same command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsdr_eval.jsonl import read_json, read_jsonl

DSDR_EVAL = Path(sys.executable).parent / "dsdr-eval"
N_PROBLEMS, N_SAMPLES = 8, 4
EXPECTED = N_PROBLEMS * (1 + N_SAMPLES)


def _command(model_dir, data_dir, out, *extra):
    return [str(DSDR_EVAL), "run", "--model", str(model_dir), "--benchmarks", "math500", "--protocol", "quick",
            "--n", str(N_SAMPLES), "--limit", str(N_PROBLEMS), "--max-tokens", "40", "--batch-size", "4",
            "--backend", "hf", "--data-dir", str(data_dir), "--out", str(out), "--no-diversity",
            "--no-progress", *extra]


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")


def _run(cmd, timeout=300):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _by_key(rows):
    return {(r["benchmark"], r["phase"], r["problem_id"], r["sample_idx"]): r for r in rows}


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("run-full") / "run"
    proc = _run(_command(tiny_model_dir, data_dir, out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_uninterrupted_run_writes_the_contract(uninterrupted):
    out, proc = uninterrupted
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == EXPECTED == len(_by_key(samples))
    fields = {"benchmark", "problem_id", "sample_idx", "phase", "problem", "gold", "prompt", "completion",
              "finish_reason", "n_prompt_tokens", "n_completion_tokens", "temperature", "top_p",
              "max_tokens", "seed"}
    assert all(fields <= set(row) for row in samples)
    assert {(r["phase"], r["temperature"], r["top_p"]) for r in samples} == {("pass1", 0.1, 0.9), ("sampling", 0.7, 0.9)}
    assert all(r["finish_reason"] in ("stop", "length") and 1 <= r["n_completion_tokens"] <= 40 for r in samples)
    assert all("Please reason step by step" in r["prompt"] and r["prompt"].startswith("<|im_start|>") for r in samples)
    config = read_json(out / "config.json")
    assert config["kind"] == "eval" and config["backend"]["name"] == "hf" and config["backend"]["version"]
    assert config["model"]["fingerprint"] and config["template"]["chat"] is True
    assert config["protocol"]["max_tokens"] == 40 and config["versions"]["torch"]
    assert config["benchmarks"][0]["n_problems"] == N_PROBLEMS
    assert len(read_jsonl(out / "graded.jsonl")) == EXPECTED
    metrics = read_json(out / "metrics.json")
    assert metrics["benchmarks"]["math500"]["n_problems"] == N_PROBLEMS
    assert "math500" in proc.stdout  # the summary table


def test_kill_9_then_rerun_equals_uninterrupted(uninterrupted, tiny_model_dir, data_dir, tmp_path):
    full_dir, _ = uninterrupted
    out = tmp_path / "run"
    cmd = _command(tiny_model_dir, data_dir, out)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(),
                            start_new_session=True)
    samples = out / "samples.jsonl"
    deadline = time.time() + 240
    try:
        while _lines(samples) < 5:
            assert proc.poll() is None, f"run ended before it could be killed: {proc.stderr.read()[-2000:]}"
            assert time.time() < deadline, "no samples written in 240 s"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    written = _lines(samples)
    assert 5 <= written < EXPECTED, "the kill must land mid-run"
    # what a kill in the middle of an append leaves: a torn last line
    with samples.open("a") as fh:
        fh.write('{"benchmark": "math500", "problem_id": "torn')

    rerun = _run(cmd)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "resumed:" in rerun.stdout
    resumed = read_jsonl(out / "samples.jsonl")
    full = read_jsonl(full_dir / "samples.jsonl")
    assert len(resumed) == EXPECTED == len(_by_key(resumed))  # none doubled, none missing
    # same text for every sample (batches and seeds are keyed by content), so the same metrics
    assert {k: r["completion"] for k, r in _by_key(resumed).items()} == \
           {k: r["completion"] for k, r in _by_key(full).items()}
    assert read_json(out / "metrics.json")["benchmarks"] == read_json(full_dir / "metrics.json")["benchmarks"]

    # a complete run dir: rerunning re-scores without generating
    again = _run(cmd)
    assert again.returncode == 0 and "nothing to generate" in again.stdout
    assert len(read_jsonl(out / "samples.jsonl")) == EXPECTED
    config = read_json(out / "config.json")
    assert len(config["resumed"]) == 1  # one continuation that generated


def test_rerun_with_another_protocol_is_refused(uninterrupted, tiny_model_dir, data_dir):
    out, _ = uninterrupted
    before = (out / "samples.jsonl").read_bytes()
    proc = _run(_command(tiny_model_dir, data_dir, out, "--temperature", "1.0"))
    assert proc.returncode == 2
    assert "different protocol" in proc.stderr and "--force-config" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (out / "samples.jsonl").read_bytes() == before
