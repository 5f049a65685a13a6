"""`dsdr-eval sweep`: every K-th checkpoint of a training run evaluated (hf backend, tiny random
model) into one run directory each, sweep.json, resume, bad input; the dashboard's sweep overlay."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dsdr_eval.rundir import sweepdir
from dsdr_eval.cli import main

EVAL = ["--backend", "hf", "--device", "cpu", "--benchmarks", "math500", "--limit", "1", "--n", "2",
        "--max-tokens", "4", "--no-diversity", "--no-progress", "--batch-size", "4", "--grading-workers", "1"]


def make_train_run(root: Path, model_dir: Path, steps: tuple[int, ...] = (1, 2, 3), final: bool = True) -> Path:
    """A dsdr-train run dir: config.json kind=train, metrics.jsonl, checkpoints/step_XXXXXX/ and final/
    (copies of the tiny model: what save_pretrained writes, without the trainer state)."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"kind": "train", "algo": "dsdr", "label": "tiny-dsdr",
                                                  "config": {"algo": "dsdr", "lr": 1e-3}}))
    (root / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward/mean": 0.0}) + "\n"
                                                for s in range(1, max(steps) + 1)))
    for step in steps:
        shutil.copytree(model_dir, root / "checkpoints" / f"step_{step:06d}")
    if final:
        shutil.copytree(model_dir, root / "final")
    return root


@pytest.fixture()
def train_run(tmp_path, tiny_model_dir) -> Path:
    return make_train_run(tmp_path / "train", tiny_model_dir)


def run_sweep(train: Path, out: Path, data_dir: Path, *extra: str) -> int:
    return main(["sweep", str(train), "--out", str(out), "--data-dir", str(data_dir), *EVAL, *extra])


@pytest.mark.slow  # evaluates tiny-Llama checkpoints (1.5-17 s)
def test_sweep_every_k_plus_final_then_resume_skips(train_run, tmp_path, data_dir, capsys):
    out = tmp_path / "sweep"
    assert run_sweep(train_run, out, data_dir, "--every", "2", "--include-final") == 0
    record = json.loads((out / "sweep.json").read_text())
    assert [c["name"] for c in record["checkpoints"]] == ["step_000001", "step_000003", "final"]
    assert record["steps"] == [1, 3, 3]  # final/ = the last step of metrics.jsonl
    assert all(c["status"] == "done" for c in record["checkpoints"])
    assert record["train_run"]["label"] == "tiny-dsdr" and record["train_run"]["algo"] == "dsdr"
    assert record["eval"]["n"] == 2 and record["eval"]["max_tokens"] == 4 and record["eval"]["backend"] == "hf"
    for entry in record["checkpoints"]:
        run = out / entry["run_dir"]
        config = json.loads((run / "config.json").read_text())
        assert Path(config["model"]["path"]).resolve() == (train_run / ("final" if entry["name"] == "final" else
                                                          f"checkpoints/{entry['name']}")).resolve()
        assert config["label"] == f"tiny-dsdr {entry['name']}"
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["benchmarks"]["math500"]["n_samples_per_problem"] == 2
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/samples.jsonl")}
    capsys.readouterr()

    assert run_sweep(train_run, out, data_dir, "--every", "2", "--include-final") == 0
    assert "3 of 3 checkpoints already evaluated; skipped" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/samples.jsonl")} == stamps

    # The training run went on (step 4) and a smaller --every: only the new checkpoints run.
    shutil.copytree(train_run / "final", train_run / "checkpoints" / "step_000004")
    assert run_sweep(train_run, out, data_dir, "--include-final") == 0
    record = json.loads((out / "sweep.json").read_text())
    assert [c["name"] for c in record["checkpoints"]] == \
        ["step_000001", "step_000002", "step_000003", "final", "step_000004"]  # by step (final/: 3)
    assert record["steps"] == [1, 2, 3, 3, 4]
    assert "3 of 5 checkpoints already evaluated; skipped" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/samples.jsonl") if p in stamps} == stamps


@pytest.mark.slow  # evaluates tiny-Llama checkpoints (1.5-17 s)
def test_partial_checkpoint_resumes_through_run(train_run, tmp_path, data_dir, capsys):
    out = tmp_path / "sweep"
    assert run_sweep(train_run, out, data_dir, "--every", "3") == 0  # step_000001 only
    run = out / "step_000001"
    (run / "metrics.json").unlink()  # killed after generation, before scoring
    lines = (run / "samples.jsonl").read_text().splitlines(keepends=True)
    (run / "samples.jsonl").write_text("".join(lines[:-1]))  # ... and one sample short
    capsys.readouterr()
    assert run_sweep(train_run, out, data_dir, "--every", "3") == 0
    text = capsys.readouterr().out
    assert f"resumed: {len(lines) - 1} of {len(lines)} samples" in text and "generated 1" in text
    assert (run / "metrics.json").exists() and json.loads((out / "sweep.json").read_text())["checkpoints"][0]["status"] == "done"


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_bad_input_is_one_line_exit_2(train_run, tmp_path, data_dir, capsys):
    out = tmp_path / "sweep"
    not_train = tmp_path / "evalrun"
    not_train.mkdir()
    (not_train / "config.json").write_text(json.dumps({"kind": "eval"}))
    assert run_sweep(not_train, out, data_dir) == 2
    assert "not 'train': not a training run" in _error(capsys)
    assert run_sweep(tmp_path / "absent", out, data_dir) == 2
    assert "not a training run" in _error(capsys)
    empty = make_train_run(tmp_path / "empty", train_run / "final", steps=(1,), final=False)
    shutil.rmtree(empty / "checkpoints")
    assert run_sweep(empty, out, data_dir, "--include-final") == 2
    assert "no final/ and no complete checkpoints" in _error(capsys)
    for bad in ("0", "-1", "two"):
        assert run_sweep(train_run, out, data_dir, "--every", bad) == 2
        assert "--every" in _error(capsys)
    assert run_sweep(train_run, out, data_dir, "--model", "x") == 2
    assert "--model" in _error(capsys)
    assert main(["sweep", str(train_run), "--out", str(out), "--benchmarks", "math500", "--backend", "openai",
                 "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "--backend openai" in _error(capsys)
    assert not out.exists()  # nothing was written for refused input


def test_other_eval_settings_into_a_sweep_dir_are_refused(train_run, tmp_path, data_dir, capsys):
    out = tmp_path / "sweep"
    out.mkdir()
    record = sweepdir.new_record(train_run, {"n": 2, "max_tokens": 4, "benchmarks": ["math500"]}, label=None,
                              every=1, include_final=False, command=["dsdr-eval", "sweep"])
    sweepdir.save_sweep(out, record)
    before = (out / "sweep.json").read_text()
    assert run_sweep(train_run, out, data_dir, "--max-tokens", "8") == 2
    assert "max_tokens: 4 -> 8" in _error(capsys)
    assert (out / "sweep.json").read_text() == before
    (out / "sweep.json").write_text(json.dumps({"kind": "sweep", "checkpoints": [{"run_dir": "../x"}], "eval": {}}))
    assert run_sweep(train_run, out, data_dir) == 2
    assert "checkpoints[0].run_dir" in _error(capsys)


# ----------------------------------------------------------------------------- the dashboard overlay

def write_sweep(runs: Path, name: str, data_dir: Path, accuracies: dict[int, float], *, diversity: bool) -> Path:
    """A sweep as `dsdr-eval sweep` leaves it: sweep.json (its writer) + one scored run per checkpoint
    (scored by the real scorer; the diversity block, when asked, in the documented layout)."""
    from dsdr_eval.rundir import directory as rundir
    from helpers.fixtures_runs import make_scored_run, write_train_run

    train = write_train_run(runs / "train" / name, algo=name, steps=max(accuracies))
    out = runs / "sweeps" / name
    record = sweepdir.new_record(train, {"n": 4, "benchmarks": ["aime24", "math500"]}, label=f"{name}-sweep",
                              every=1, include_final=False, command=["dsdr-eval", "sweep"])
    checkpoints = [sweepdir.Checkpoint(f"step_{s:06d}", s, train / "checkpoints" / f"step_{s:06d}") for s in accuracies]
    sweepdir.merge_checkpoints(record, checkpoints)
    for ckpt in checkpoints:
        make_scored_run(out / ckpt.name, data_dir, label=f"{name} {ckpt.name}", accuracy=accuracies[ckpt.step])
        if diversity:
            rundir.update_metrics(out / ckpt.name, rundir.DIVERSITY_SECTION, {
                b: {"all": {"d_emb": 0.1 * ckpt.step, "d_eq": 0.05 * ckpt.step}, "n_problems": 4}
                for b in ("aime24", "math500")})
        sweepdir.set_status(record, ckpt.name, "done")
    sweepdir.save_sweep(out, record)
    return out


def test_training_page_overlays_sweeps_with_cis(tmp_path, data_dir, monkeypatch):
    from test_dashboard import open_page, texts

    runs = tmp_path / "runs"
    write_sweep(runs, "grpo", data_dir, {10: 0.2, 20: 0.3, 30: 0.35}, diversity=False)
    dsdr = write_sweep(runs, "dsdr", data_dir, {10: 0.2, 20: 0.4, 30: 0.5}, diversity=True)
    record = json.loads((dsdr / "sweep.json").read_text())  # a checkpoint not evaluated yet is noted, not plotted
    record["checkpoints"].append({"name": "step_000040", "step": 40, "model": "x", "run_dir": "step_000040",
                                  "status": "pending"})
    (dsdr / "sweep.json").write_text(json.dumps(record))
    at = open_page(runs, "training", monkeypatch)
    assert set(at.multiselect(key="sweep_runs").value) == {"sweeps/dsdr", "sweeps/grpo"}
    assert at.selectbox(key="sweep_benchmark").value == "average"
    charts = {c.proto.id: json.loads(c.proto.spec) for c in at.get("plotly_chart")}
    sweep_charts = [spec for spec in charts.values() if "training step" in json.dumps(spec["layout"].get("xaxis", {}))]
    titles = [spec["layout"]["title"]["text"] for spec in sweep_charts]
    assert any(t.startswith("Pass@1") for t in titles) and any(t.startswith("Pass@k at the largest k (k = 16)")
                                                              for t in titles), titles
    assert any(t.startswith("Semantic diversity") for t in titles)
    pass1 = next(s for s in sweep_charts if s["layout"]["title"]["text"].startswith("Pass@1"))
    lines = {t["name"]: t for t in pass1["data"] if t.get("name")}
    assert set(lines) == {"dsdr-sweep", "grpo-sweep"} and lines["dsdr-sweep"]["x"] == [10, 20, 30]
    # the CI band of each sweep: metrics.json's average.ci95.pass1, in %
    metrics = json.loads((dsdr / "step_000020" / "metrics.json").read_text())
    lo, hi = metrics["average"]["ci95"]["pass1"]
    bands = [t for t in pass1["data"] if t.get("fill") == "toself"]
    assert len(bands) == 2 and bands[0]["legendgroup"] == "dsdr-sweep"
    assert bands[0]["x"] == [10, 20, 30, 30, 20, 10]  # upper edge by step, then the lower edge back
    assert abs(bands[0]["y"][1] - 100 * hi) < 1e-9 and abs(bands[0]["y"][4] - 100 * lo) < 1e-9
    assert abs(lines["dsdr-sweep"]["y"][1] - 100 * metrics["average"]["pass1"]) < 1e-9
    divs = next(s for s in sweep_charts if s["layout"]["title"]["text"].startswith("Semantic diversity"))
    assert [t["name"] for t in divs["data"] if t.get("name")] == ["dsdr-sweep"]  # grpo has none computed
    assert any("step_000040: not evaluated yet (pending)" in c for c in texts(at, "caption"))

    at.selectbox(key="sweep_benchmark").set_value("math500").run()
    assert not at.exception
    at.multiselect(key="sweep_runs").set_value(["sweeps/grpo"]).run()
    assert not at.exception


@pytest.mark.slow  # evaluates tiny-Llama checkpoints (1.5-17 s)
def test_a_broken_checkpoint_is_recorded_and_the_sweep_goes_on(tmp_path, tiny_model_dir, data_dir, capsys):
    """Issue 24: a truncated model.safetensors (10 bytes) raised from safetensors, exit 1, and left every
    later checkpoint unevaluated and sweep.json 'pending'. Now: that checkpoint is 'error' with the
    reason, the next one is evaluated, exit 2 with one line per failed checkpoint."""
    train = make_train_run(tmp_path / "train", tiny_model_dir, steps=(1, 2), final=False)
    weights = sorted((train / "checkpoints" / "step_000001").glob("*.safetensors"))
    assert weights
    for path in weights:
        path.write_bytes(b"0123456789")
    out = tmp_path / "sweep"
    assert run_sweep(train, out, data_dir) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and err[0].startswith("error: step_000001: ")
    record = sweepdir.load_sweep(out)
    status = {e["name"]: (e["status"], e.get("message", "")) for e in record["checkpoints"]}
    assert status["step_000001"][0] == "error" and status["step_000001"][1]
    assert status["step_000002"] == ("done", "")
    assert (out / "step_000002" / "metrics.json").exists()
