"""The verl log converter writes a training run directory through the run directory's one writer (issue 46
seam): under the writer lock, config.json and metrics.jsonl committed together, a non-verl run refused.
metrics_log itself imports no verl (tests_verl/ covers reading verl's own loggers)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir import directory as rundir
from dsdr_train.integrations.verl import metrics_log

LOG = "step:1 - actor/pg_loss:-0.5 - dsdr/acc/mean:0.25\nstep:2 - actor/pg_loss:inf - dsdr/acc/mean:0.5\n"


def test_a_conversion_holds_the_writer_lock_and_commits_both_files(tmp_path, capsys):
    """Mutant 'write_run writes the files directly' (as before): the held lock does not stop it."""
    (tmp_path / "verl.log").write_text(LOG)
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom dsdr_eval.rundir.directory import "
                               "writer_lock\nwith writer_lock(sys.argv[1], command='someone else'):\n"
                               "    print('held', flush=True)\n    time.sleep(600)", str(out)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert metrics_log.main([str(tmp_path / "verl.log"), "--out", str(out)]) == 2
    finally:
        holder.kill()
        holder.wait()
    assert "someone else" in capsys.readouterr().err and not (out / rundir.TRAIN_METRICS).exists()
    assert metrics_log.main([str(tmp_path / "verl.log"), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / rundir.TRAIN_METRICS).read_text().splitlines()]
    assert rows == [{"step": 1, "loss/pg": -0.5, "acc/mean": 0.25}, {"step": 2, "loss/pg": None, "acc/mean": 0.5}]
    config = rundir.load_config(out)
    assert config["engine"] == "verl" and "versions" in config and "created" in config
    assert not list(out.glob(".*.tmp*")) and not (out / rundir.COMMIT).exists()


def test_a_compact_trainers_run_is_not_overwritten(tmp_path):
    out = tmp_path / "run"
    rundir.save_config(out, {"kind": "train", "algo": "dsdr"})
    (out / rundir.TRAIN_METRICS).write_text('{"step": 1}\n')
    with pytest.raises(DsdrError, match="not a verl conversion"):
        metrics_log.write_run([{"step": 1}], out, source=tmp_path / "x.log", algo=None, label=None)
    assert (out / rundir.TRAIN_METRICS).read_text() == '{"step": 1}\n'


def test_the_trainer_names_metrics_jsonl_through_rundir():
    """No string literal "metrics.jsonl" in dsdr_train's code (docstrings aside): rundir.TRAIN_METRICS names
    the file. Mutant 'train.py appends to run_dir / "metrics.jsonl"': listed."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "dsdr_train"
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        found += [f"{path.relative_to(root.parent)}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value == rundir.TRAIN_METRICS and id(node) not in docstrings]
    assert not found, found
