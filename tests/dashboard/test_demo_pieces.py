"""The cheap pieces of `make demo` (examples/demo.py); the demo itself is not a test (it generates)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.demo_script import load_demo

REPO = Path(__file__).resolve().parents[2]
demo = load_demo()
EXAMPLES = REPO / "reports" / "mini_experiment" / "runs"


def test_degenerate_means_no_correct_sample_anywhere():
    zero = {"avg@n": 0.0, "pass@k": {"1": 0.0, "2": 0.0, "4": 0.0}}
    assert demo.is_degenerate({"benchmarks": {"math500": zero}})
    assert not demo.is_degenerate({"benchmarks": {"math500": zero,
                                                  "aime24": {"avg@n": 0.05, "pass@k": {"1": 0.05}}}})
    # a metrics block whose avg@n is missing or 0 still counts as non-degenerate if any Pass@k is positive
    assert not demo.is_degenerate({"benchmarks": {"math500": {"avg@n": 0.0, "pass@k": {"4": 0.25}}}})


def test_the_example_runs_are_real_non_degenerate_outputs_with_their_settings():
    """What the demo falls back to: the mini experiment's samples and the config that made them."""
    for name in demo.EXAMPLE_RUNS:
        run = EXAMPLES / name
        config = json.loads((run / "config.json").read_text())
        assert config["kind"] == "eval" and config["protocol"]["phases"]
        assert not demo.is_degenerate(json.loads((run / "metrics.json").read_text()))


def test_copy_example_runs_takes_only_samples_and_config(tmp_path):
    copies = demo.copy_example_runs(EXAMPLES, tmp_path)
    assert [c.name for c in copies] == list(demo.EXAMPLE_RUNS)
    for copy in copies:
        assert sorted(p.name for p in copy.iterdir()) == ["config.json", "samples.jsonl"]
        assert (copy / "samples.jsonl").read_bytes() == (EXAMPLES / copy.name / "samples.jsonl").read_bytes()


def test_one_torch_thread_only_on_busy_cores_and_never_over_an_explicit_setting(monkeypatch):
    monkeypatch.setattr(demo.os, "cpu_count", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    demo.use_one_thread_when_busy()
    assert "OMP_NUM_THREADS" not in demo.os.environ
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (4.0, 4.0, 4.0))
    demo.use_one_thread_when_busy()
    assert demo.os.environ["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    demo.use_one_thread_when_busy()
    assert demo.os.environ["OMP_NUM_THREADS"] == "2"


def test_the_demo_ships_the_mini_experiments_training_logs(tmp_path):
    """The dashboard's training page of the demo shows these (issue 23: it was empty)."""
    copies = demo.copy_training_logs(EXAMPLES, tmp_path)
    assert [c.name for c in copies] == list(demo.EXAMPLE_TRAIN_RUNS) == ["train_grpo", "train_dsdr"]
    for copy in copies:
        assert json.loads((copy / "config.json").read_text())["kind"] == "train"
        assert (copy / "metrics.jsonl").read_bytes() == (EXAMPLES / copy.name / "metrics.jsonl").read_bytes()
        assert len((copy / "metrics.jsonl").read_text().splitlines()) == 44  # one line per training step
