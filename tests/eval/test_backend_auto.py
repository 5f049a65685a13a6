"""`--backend auto`: the documented rule (dsdr_eval/backends/__init__.py) and its record in config.json.

No engine is started: the probes (vllm importable, CUDA visible) are passed in or patched.
"""

from __future__ import annotations

import json

import pytest

import dsdr_eval
from dsdr_eval import backends
from dsdr_eval.backends import CPU_VLLM_MIN_TOKEN_BUDGET, Workload, choose_backend
from helpers.fake_engine import BoxedOne


def _workload_with_budget(budget: int) -> Workload:
    return Workload(n_problems=1, rollouts_per_problem=1, max_tokens=budget)


def test_threshold_is_the_break_even_of_the_measured_constants():
    start, tps, speedup = backends.CPU_VLLM_START_S, backends.HF_CPU_TOKENS_PER_S, backends.CPU_VLLM_SPEEDUP
    # at the threshold both backends take the same time: start + T / (speedup * tps) == T / tps
    t = CPU_VLLM_MIN_TOKEN_BUDGET
    assert start + t / (speedup * tps) == pytest.approx(t / tps, rel=1e-3)


def test_without_vllm_it_is_hf_whatever_the_size():
    choice = choose_backend(_workload_with_budget(10**9), vllm_importable=False, cuda_available=True)
    assert (choice.chosen, choice.reason) == ("hf", "vllm is not importable")


def test_gpu_with_vllm_is_vllm_even_for_a_tiny_run():
    choice = choose_backend(_workload_with_budget(1), vllm_importable=True, cuda_available=True)
    assert choice.chosen == "vllm" and "CUDA" in choice.reason


@pytest.mark.parametrize("budget, expected", [(CPU_VLLM_MIN_TOKEN_BUDGET - 1, "hf"),
                                              (CPU_VLLM_MIN_TOKEN_BUDGET, "vllm"),
                                              (100 * CPU_VLLM_MIN_TOKEN_BUDGET, "vllm")])
def test_cpu_choice_follows_the_token_budget(budget, expected):
    choice = choose_backend(_workload_with_budget(budget), vllm_importable=True, cuda_available=False)
    assert choice.chosen == expected
    assert choice.inputs["token_budget"] == budget
    assert choice.inputs["cpu_vllm_min_token_budget"] == CPU_VLLM_MIN_TOKEN_BUDGET
    assert str(budget) in choice.reason


def test_token_budget_is_problems_times_rollouts_times_max_tokens():
    w = Workload(n_problems=8, rollouts_per_problem=5, max_tokens=256)
    assert w.token_budget == 8 * 5 * 256
    choice = choose_backend(w, vllm_importable=True, cuda_available=False)
    assert {k: choice.inputs[k] for k in ("n_problems", "rollouts_per_problem", "max_tokens")} == \
        {"n_problems": 8, "rollouts_per_problem": 5, "max_tokens": 256}


def test_cpu_with_unknown_workload_is_hf():
    assert choose_backend(None, vllm_importable=True, cuda_available=False).chosen == "hf"


def test_explicit_names_are_kept():
    for name in ("hf", "vllm", "openai"):
        assert backends.resolve_backend_name(name, _workload_with_budget(1)) == name


def _evaluate(tmp_path, data_dir, **options):
    """`evaluate` with a model that needs no resolution and an engine that stops where generation starts."""
    from dsdr_eval.models import ResolvedModel

    return dsdr_eval.evaluate(ResolvedModel("m", "m", False, None, None), benchmarks=["math500"], limit=3,
                              protocol="quick", n=4, max_tokens=100, data_dir=str(data_dir), out=tmp_path / "run",
                              no_progress=True, engine=lambda name, model: _NoEngine(name), **options)


class _Stop(Exception):
    pass


class _NoEngine(BoxedOne):
    """Renders prompts and reports its config like a backend; stops the run where generation would start."""

    def generate(self, requests, batches, on_results):
        raise _Stop

    def config(self):
        return {"name": self.name, "version": "test"}


@pytest.mark.slow  # `run` preloads MiniLM beside the (replaced) engine: caught by DSDR_CHECK_FAST=1
@pytest.mark.parametrize("threshold_delta, expected", [(1, "hf"), (0, "vllm")])
def test_run_records_why_auto_chose_in_config_json(tmp_path, data_dir, monkeypatch, threshold_delta, expected):
    """`run --backend auto` sizes its own workload (3 problems x (1 + 4) rollouts x 100 tokens) and
    config.json records the choice under backend.auto (the engine is replaced: none starts)."""
    budget = 3 * 5 * 100
    monkeypatch.setattr(backends, "CPU_VLLM_MIN_TOKEN_BUDGET", budget + threshold_delta)
    monkeypatch.setattr(backends, "_vllm_importable", lambda: True)
    monkeypatch.setattr(backends, "_cuda_available", lambda: False)
    with pytest.raises(_Stop):
        _evaluate(tmp_path, data_dir)
    backend = json.loads((tmp_path / "run" / "config.json").read_text())["backend"]
    assert backend["name"] == expected
    record = backend["auto"]
    assert record["chosen"] == expected and str(budget) in record["reason"]
    assert record["inputs"]["token_budget"] == budget
    assert record["inputs"]["n_problems"] == 3 and record["inputs"]["rollouts_per_problem"] == 5
    assert record["inputs"]["max_tokens"] == 100 and record["inputs"]["cuda_available"] is False


@pytest.mark.slow  # `run` preloads MiniLM beside the (replaced) engine: caught by DSDR_CHECK_FAST=1
def test_an_explicit_backend_records_no_auto_choice(tmp_path, data_dir):
    with pytest.raises(_Stop):
        _evaluate(tmp_path, data_dir, backend="hf")
    backend = json.loads((tmp_path / "run" / "config.json").read_text())["backend"]
    assert backend["name"] == "hf" and "auto" not in backend
