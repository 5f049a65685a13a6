"""`dsdr-eval run` end to end through the CLI (issue 46 item 0), with a fake engine in place of the model:
a protocol without a sampling phase (greedy) skips diversity with a note and exits 0; run's own
--data-dir reaches its scoring step (no hub fallback, no warning) and a later `score` finds the files the
run recorded; greedy generation configs carry no sampling-only flag."""

from __future__ import annotations

import json

import pytest
from helpers.fake_engine import BoxedOne

from dsdr_eval.backends.sampling import SamplingSpec, hf_generation_config
from dsdr_eval.cli import main
from dsdr_eval.run import evaluation


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    """A model directory and the fake engine every `run` below gets instead of loading it."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setattr(evaluation, "make_backend", lambda plan, options: BoxedOne(plan.backend_name))
    return model


def _run(model, out, data_dir, *extra):
    return main(["run", "--model", str(model), "--benchmarks", "math500", "--limit", "2", "--backend", "hf",
                 "--max-tokens", "8", "--data-dir", str(data_dir), "--out", str(out), "--grading-workers", "1",
                 "--no-progress", *extra])


def test_greedy_run_skips_diversity_with_a_note_and_exits_0(tmp_path, fake_model, data_dir, capsys):
    """Mutant 'finish runs diversity whatever the phases': exit 2, `no rollouts of phase 'sampling'`."""
    assert _run(fake_model, tmp_path / "g1", data_dir, "--protocol", "greedy") == 0
    captured = capsys.readouterr()
    notes = [line for line in captured.out.splitlines() if line.startswith("note: diversity skipped")]
    assert len(notes) == 1 and "greedy" in notes[0] and "sampling" in notes[0], captured.out
    assert "error" not in captured.err
    metrics = json.loads((tmp_path / "g1" / "metrics.json").read_text())
    assert metrics["benchmarks"]["math500"]["pass1"] == 0.0 and "diversity" not in metrics["benchmarks"]["math500"]


def test_run_data_dir_reaches_its_scoring_step_and_a_later_score(tmp_path, fake_model, data_dir, capsys,
                                                                 monkeypatch):
    """No $DSDR_DATA_DIR: run's --data-dir is what its scoring step reads the registry from, and `score`
    later reads the files the run recorded. Mutants 'finish drops data_dir' and 'RegistryContext ignores
    the recorded files': the hub is tried (offline: a warning)."""
    monkeypatch.delenv("DSDR_DATA_DIR", raising=False)
    tried: list[str] = []
    import dsdr_eval.tasks as tasks

    real = tasks.load_benchmark

    def spy(name, **kwargs):
        tried.append(str(kwargs.get("data_dir")))
        return real(name, **kwargs)

    monkeypatch.setattr("dsdr_eval.scoring.score.load_benchmark", spy)
    assert _run(fake_model, tmp_path / "r", data_dir, "--protocol", "quick", "--n", "2", "--no-diversity") == 0
    assert "problem texts not available" not in capsys.readouterr().err
    assert tried == [str(data_dir)]
    assert main(["score", str(tmp_path / "r"), "--workers", "1", "--no-progress", "--bootstrap", "0"]) == 0
    assert "problem texts not available" not in capsys.readouterr().err
    assert tried[-1] == str(data_dir)


def test_a_rerun_scores_with_its_own_data_dir_when_the_recorded_one_moved(tmp_path, fake_model, data_dir, capsys,
                                                                         monkeypatch):
    """The benchmark files moved after the first run: the rerun's --data-dir (not config.json's old
    path, not the hub) gives the scoring step its problems. Mutant 'finish drops data_dir': a warning."""
    monkeypatch.delenv("DSDR_DATA_DIR", raising=False)
    first, moved = tmp_path / "data", tmp_path / "moved"
    first.mkdir()
    (first / "math500.jsonl").write_bytes((data_dir / "math500.jsonl").read_bytes())
    assert _run(fake_model, tmp_path / "r", first, "--protocol", "greedy") == 0
    first.rename(moved)
    capsys.readouterr()
    assert _run(fake_model, tmp_path / "r", moved, "--protocol", "greedy") == 0
    captured = capsys.readouterr()
    assert "nothing to generate" in captured.out and "problem texts not available" not in captured.err


def test_greedy_generation_config_has_no_sampling_only_flag():
    """transformers warns 'not valid and may be ignored: [top_k]' for a sampling flag under greedy;
    strict validation raises on it. Mutant 'greedy keeps _HF_NEUTRAL whole': ValueError."""
    greedy = hf_generation_config(SamplingSpec(0.0, 0.9, 8, (0,), top_k=20, min_p=0.05), pad_token_id=0)
    greedy.validate(strict=True)
    assert greedy.do_sample is False and greedy.top_k is None and greedy.min_p is None
    sampled = hf_generation_config(SamplingSpec(0.7, 0.9, 8, (0,), top_k=20), pad_token_id=0)
    sampled.validate(strict=True)
    assert sampled.top_k == 20 and sampled.typical_p == 1.0
