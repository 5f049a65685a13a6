"""`dsdr-eval score` end to end on the shipped example, the CLI dispatcher, and run-dir scoring."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from dsdr_eval import cli
from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.samples import read_samples as load_samples
from dsdr_eval.scoring.score import score_run_dir

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "math_samples.jsonl"


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsdr_eval.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_score_example_end_to_end(tmp_path):
    out = tmp_path / "scored"
    proc = run_cli("score", str(EXAMPLE), "--out", str(out), "--workers", "2", "--bootstrap", "200", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "math500" in proc.stdout and "Avg@n" in proc.stdout
    graded = [json.loads(line) for line in (out / "graded.jsonl").read_text().splitlines()]
    samples = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    assert len(graded) == len(samples) == 45
    assert all({"extracted", "status", "correct", "answer_class"} <= set(row) for row in graded)
    metrics = json.loads((out / "metrics.json").read_text())
    entry = metrics["benchmarks"]["math500"]
    assert entry["n_problems"] == 5 and entry["n_samples_per_problem"] == 8
    assert set(entry["pass@k"]) == {"1", "2", "4", "8"} and "pass1" in entry and "avg@16" not in entry
    counts = entry["status_counts"]
    assert sum(counts.values()) == 45 and counts["no_answer"] >= 1 and counts["incorrect"] >= 1
    sampling = [r for r in graded if r["phase"] == "sampling"]
    assert entry["avg@n"] == pytest.approx(sum(r["correct"] for r in sampling) / len(sampling))
    assert metrics["provenance"]["grading"]["grader"] == "math-verify"
    assert metrics["provenance"]["bootstrap"] == 200 and metrics["provenance"]["n_samples"] == 45


def test_missing_field_names_file_line_field(tmp_path):
    lines = EXAMPLE.read_text().splitlines()[:3]
    broken = json.loads(lines[2])
    del broken["completion"]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines[:2] + [json.dumps(broken)]) + "\n")
    proc = run_cli("score", str(path), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert f"error: {path}:3:completion" in proc.stderr and "Traceback" not in proc.stderr


def test_file_without_out_is_an_error(tmp_path):
    proc = run_cli("score", str(EXAMPLE))
    assert proc.returncode == 2 and "--out DIR is required" in proc.stderr


def test_help_lists_every_subcommand():
    proc = run_cli("--help")
    assert proc.returncode == 0
    for name in ("run", "score", "diversity", "judge", "report"):
        assert name in proc.stdout
    proc = run_cli("score", "--help")
    assert proc.returncode == 0 and "--bootstrap" in proc.stdout and "--timeout" in proc.stdout


def test_missing_subcommand_module_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setitem(cli.SUBCOMMANDS, "ghost", ("dsdr_eval.no_such_module", "not written yet"))
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0 and "ghost" in capsys.readouterr().out
    assert cli.main(["ghost", "x"]) == 2
    assert "subcommand 'ghost' is not available" in capsys.readouterr().err


def test_keyboard_interrupt_exits_130(monkeypatch, capsys):
    module = types.ModuleType("dsdr_eval._interrupting_cli")
    module.add_arguments = lambda parser: None

    def main(args):
        raise KeyboardInterrupt

    module.main = main
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(cli.SUBCOMMANDS, "interrupt", (module.__name__, "raises KeyboardInterrupt"))
    assert cli.main(["interrupt"]) == 130


def test_score_run_dir_in_place_keeps_other_sections(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(EXAMPLE, run / "samples.jsonl")
    (run / "metrics.json").write_text(json.dumps(
        {"benchmarks": {"math500": {"diversity": {"d": 0.5}, "judge": {"overall": 3.0}, "avg@n": 0.0}}}))
    metrics = score_run_dir(run, workers=2, progress=False, bootstrap=50)
    saved = json.loads((run / "metrics.json").read_text())
    assert saved["benchmarks"]["math500"]["diversity"] == {"d": 0.5}
    assert saved["benchmarks"]["math500"]["judge"] == {"overall": 3.0}
    assert saved["benchmarks"]["math500"]["avg@n"] == metrics["benchmarks"]["math500"]["avg@n"] > 0
    assert (run / "graded.jsonl").exists()
    with pytest.raises(DsdrError, match="missing samples.jsonl"):
        score_run_dir(tmp_path)


@pytest.mark.parametrize("line, message", [
    ({"problem_id": "a", "gold": "1", "completion": "x", "phase": "greedy"}, r":1:phase: must be one of"),
    ({"problem_id": "a", "gold": "1", "completion": None}, r":1:completion: missing required field"),
    ({"problem_id": "a", "gold": "1", "completion": 5}, r":1:completion: must be a string"),
    ({"problem_id": "a", "gold": "", "completion": "x"}, r":1:gold: empty gold"),
    ({"problem_id": "a", "gold": "1", "completion": "x", "sample_idx": -1}, r":1:sample_idx"),
])
def test_load_samples_validation(tmp_path, line, message):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(DsdrError, match=message):
        load_samples(path)


def test_load_samples_duplicates_defaults_and_truncated_tail(tmp_path):
    path = tmp_path / "s.jsonl"
    good = [{"problem_id": 7, "gold": 3, "completion": "a"}, {"problem_id": 7, "gold": "3", "completion": "b"}]
    path.write_text("\n".join(json.dumps(r) for r in good) + '\n{"problem_id": 7, "go')
    rows = load_samples(path)  # the partial last line of an interrupted append is skipped
    assert [(r.problem_id, r.gold, r.phase, r.sample_idx) for r in rows] == [
        ("7", "3", "sampling", 0), ("7", "3", "sampling", 1)]
    path.write_text("\n".join(json.dumps(dict(r, sample_idx=0)) for r in good) + "\n")
    with pytest.raises(DsdrError, match=r":2:sample_idx: duplicate sample .*\(first on line 1\)"):
        load_samples(path)
    path.write_text("\n".join(json.dumps(dict(r, gold=g)) for r, g in zip(good, ("3", "4"))) + "\n")
    with pytest.raises(DsdrError, match=r":2:gold: '4' differs from '3'"):
        load_samples(path)
