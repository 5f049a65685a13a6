"""The run directory's reliability (issue 24): one writer per directory (real processes), all-or-nothing
updates after a full disk or a kill between renames, readers that refuse malformed or non-regular
files in one line, the umask, and escaping in the report and the dashboard's formula chips."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.cli import main as cli_main
from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.jsonl import read_json, write_json
from dsdr_eval.rundir.results import load_run
from helpers.fixtures_runs import write_eval_samples

PY = sys.executable
HOLD = """
import sys, time
from dsdr_eval.rundir import directory as rundir
with rundir.writer_lock(sys.argv[1], command="holder-test", rank=int(sys.argv[2])):
    print("locked", flush=True)
    time.sleep(60)
"""


def hold_lock(path: Path, rank: int = 0) -> subprocess.Popen:
    """Another process holding RUN_DIR's writer lock (until killed)."""
    proc = subprocess.Popen([PY, "-c", HOLD, str(path), str(rank)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def one_error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def scored(tmp_path_factory, data_dir) -> Path:
    """A small run directory scored by the real `dsdr-eval score`."""
    run = write_eval_samples(tmp_path_factory.mktemp("scored") / "run", data_dir, label="r", accuracy=0.5,
                             benchmarks={"math500": 2})
    assert cli_main(["score", str(run), "--workers", "1", "--bootstrap", "0", "--no-progress"]) == 0
    return run


@pytest.fixture
def run_copy(scored, tmp_path) -> Path:
    return Path(shutil.copytree(scored, tmp_path / "run"))


# ----------------------------------------------------------------------------- one writer per directory

def test_a_second_writer_process_is_refused_naming_the_holder(run_copy, capsys):
    holder = hold_lock(run_copy)
    try:
        before = (run_copy / "graded.jsonl").read_bytes()
        code = cli_main(["score", str(run_copy), "--workers", "1", "--bootstrap", "0", "--no-progress"])
        line = one_error_line(capsys)
        assert code == 2 and str(run_copy) in line and f"pid {holder.pid}" in line and "holder-test" in line
        assert (run_copy / "graded.jsonl").read_bytes() == before
    finally:
        stop(holder)


@pytest.mark.parametrize("command", ["import", "diversity", "judge", "sweep", "run"])
def test_every_writer_command_takes_the_lock(command, run_copy, tmp_path, capsys):
    """Each CLI that writes a directory is refused while another process holds it (before loading anything)."""
    holder = hold_lock(run_copy)
    try:
        argv = {"import": ["import", "--from", "jsonl", str(run_copy / "samples.jsonl"), "--out", str(run_copy)],
                "diversity": ["diversity", str(run_copy), "--no-progress"],
                "judge": ["judge", str(run_copy), "--judge-base-url", "http://127.0.0.1:9/v1", "--judge-model", "m"],
                "sweep": ["sweep", str(_train_run(tmp_path)), "--out", str(run_copy), "--backend", "hf",
                          "--benchmarks", "math500"],
                "run": ["run", "--model", "m", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
                        "--benchmarks", "math500", "--limit", "1", "--out", str(run_copy)]}[command]
        code = cli_main(argv)
        line = one_error_line(capsys)
        assert code == 2 and f"pid {holder.pid}" in line, line
    finally:
        stop(holder)


def _train_run(root: Path) -> Path:
    train = root / "train"
    (train / "checkpoints" / "step_000001").mkdir(parents=True)
    (train / "checkpoints" / "step_000001" / "config.json").write_text("{}")
    (train / "config.json").write_text(json.dumps({"kind": "train", "algo": "dsdr", "config": {}}))
    return train


def test_dsdr_train_takes_the_lock(tmp_path, capsys):
    from dsdr_train.cli import main as train_main

    out = tmp_path / "train_out"
    out.mkdir()
    holder = hold_lock(out)
    try:
        data = tmp_path / "d.jsonl"
        data.write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n")
        code = train_main(["--algo", "grpo", "--model", "smollm2-135m", "--train-data", str(data), "--out", str(out)])
        assert code == 2 and f"pid {holder.pid}" in one_error_line(capsys)
    finally:
        stop(holder)


def test_two_real_runs_on_one_directory_write_each_sample_once(tmp_path, data_dir):
    """The issue's case: two `dsdr-eval run` processes on one RUN_DIR, the second started while the first runs."""
    from helpers.fault_server import FaultServer

    out = tmp_path / "run"
    with FaultServer(default="timeout", delay_s=0.5, reply="so \\boxed{1}") as server:
        argv = [PY, "-m", "dsdr_eval.cli", "run", "--model", server.model, "--backend", "openai", "--base-url",
                server.base_url, "--benchmarks", "math500", "--limit", "1", "--protocol", "quick", "--n", "4",
                "--max-tokens", "8", "--data-dir", str(data_dir), "--out", str(out), "--no-diversity",
                "--no-progress", "--grading-workers", "1", "--max-concurrency", "1"]
        first = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not (out / rundir.LOCK).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        first.communicate(timeout=300)
    assert first.returncode == 0
    assert second.returncode == 2 and "Traceback" not in second.stderr
    assert f"pid {first.pid}" in second.stderr and str(out) in second.stderr
    keys = [tuple(json.loads(line)[k] for k in ("problem_id", "phase", "sample_idx"))
            for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 5  # pass1 + 4 sampling, each once


def test_the_lock_of_a_kill_9d_writer_is_not_stale(tmp_path):
    holder = hold_lock(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with rundir.writer_lock(tmp_path):  # the kernel released it with the process
        assert rundir.holds_writer_lock(tmp_path)
    assert not rundir.holds_writer_lock(tmp_path)


FORKING_HOLDER = """
import os, sys, time
from dsdr_eval.rundir import directory as rundir
with rundir.writer_lock(sys.argv[1]):
    child = os.fork()
    if child == 0:  # a worker (grading pool, data loader) that outlives the writer
        print(os.getpid(), flush=True)  # after the fork hooks ran in this child: it is a worker now
        time.sleep(30)
        os._exit(0)
    time.sleep(60)
"""


def test_a_worker_forked_by_a_kill_9d_writer_does_not_keep_the_lock(tmp_path):
    """The writer dies by kill -9 (nothing released, lock file left); its forked worker lives on. The
    worker must not hold the lock: the next writer takes it."""
    holder = subprocess.Popen([PY, "-c", FORKING_HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    child = int(holder.stdout.readline())
    try:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        assert (tmp_path / rundir.LOCK).exists()  # left behind, and not stale
        with rundir.writer_lock(tmp_path):
            pass
    finally:
        os.kill(child, signal.SIGKILL)


def test_reentrant_in_process_and_ranks_do_not_refuse_each_other(tmp_path):
    with rundir.writer_lock(tmp_path), rundir.writer_lock(tmp_path):  # run -> score in one process
        assert rundir.holds_writer_lock(tmp_path)
    assert not rundir.holds_writer_lock(tmp_path)
    rank1 = hold_lock(tmp_path, rank=1)  # torchrun rank 1 of the same job
    try:
        with rundir.writer_lock(tmp_path, rank=0):
            pass
        with pytest.raises(DsdrError, match=f"pid {rank1.pid}"):
            with rundir.writer_lock(tmp_path, rank=1):  # a second job's rank 1
                pass
    finally:
        stop(rank1)


def test_a_refused_command_leaves_no_directory_it_created(tmp_path):
    target = tmp_path / "new"
    with rundir.writer_lock(target):
        assert target.is_dir()
    assert not target.exists()  # nothing was written: nothing is left


# ----------------------------------------------------------------------------- all or nothing

def _more_samples(run: Path, data_dir: Path, tmp_path: Path) -> None:
    more = write_eval_samples(tmp_path / "more", data_dir, label="r", accuracy=0.5, benchmarks={"math500": 3})
    shutil.copy(more / "samples.jsonl", run / "samples.jsonl")


@pytest.mark.parametrize("failing_file", [1, 2, 3])
def test_score_on_a_full_disk_changes_nothing(run_copy, data_dir, tmp_path, monkeypatch, capsys, failing_file):
    """ENOSPC on graded.jsonl's temp, metrics.json's temp or the commit record: both files stay the old ones."""
    from dsdr_eval.rundir import jsonl

    _more_samples(run_copy, data_dir, tmp_path)
    before = {n: (run_copy / n).read_bytes() for n in ("graded.jsonl", "metrics.json")}
    real, count = jsonl.atomic_temp, {"n": 0}

    def full_disk(path, chunks):
        count["n"] += 1
        if count["n"] == failing_file:
            def write_some():
                yield next(iter(chunks))
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(path, write_some())
        return real(path, chunks)

    monkeypatch.setattr(jsonl, "atomic_temp", full_disk)
    monkeypatch.setattr(rundir, "atomic_temp", full_disk)
    code = cli_main(["score", str(run_copy), "--workers", "1", "--bootstrap", "0", "--no-progress"])
    line = one_error_line(capsys)
    assert code == 2 and "No space left on device" in line and "Traceback" not in line
    assert {n: (run_copy / n).read_bytes() for n in before} == before
    assert not [p for p in run_copy.iterdir() if p.name.endswith(".tmp") or p.name == rundir.COMMIT]


def test_a_writer_killed_between_renames_is_completed_by_the_next_reader(run_copy, data_dir, tmp_path, monkeypatch):
    """The commit record is written before the first rename: a reader finishes the renames, so it sees the
    new graded.jsonl with the metrics.json made from it, never the new one beside the old other."""
    _more_samples(run_copy, data_dir, tmp_path)
    real, count = os.replace, {"n": 0}

    class Killed(BaseException):
        """Stands for kill -9: nothing after it runs in the writer (no handler catches it)."""

    def dies_after_first_rename(src, dst):
        count["n"] += 1
        if count["n"] == 3:  # the commit record (1), graded.jsonl (2), then metrics.json: killed
            raise Killed
        return real(src, dst)

    monkeypatch.setattr(os, "replace", dies_after_first_rename)
    with pytest.raises(Killed):
        cli_main(["score", str(run_copy), "--workers", "1", "--bootstrap", "0", "--no-progress"])
    monkeypatch.setattr(os, "replace", real)
    assert (run_copy / rundir.COMMIT).exists()
    run = load_run(run_copy)  # a reader
    rows = (run_copy / "graded.jsonl").read_text().splitlines()
    assert run.provenance.get("n_samples") == len(rows) == 3 * 17
    assert not (run_copy / rundir.COMMIT).exists() and not list(run_copy.glob(".*.tmp"))


def test_judge_writes_its_files_metrics_and_settings_in_one_commit(run_copy, monkeypatch):
    calls = []
    monkeypatch.setattr(rundir, "commit_files", lambda run_dir, files: calls.append(sorted(files)))
    rundir.update_metrics(run_copy, rundir.JUDGE_SECTION, {"math500": {"overall": 5.0}},
                          files={rundir.JUDGE: [b"{}\n"]}, settings={"x": 1})
    assert calls == [sorted([rundir.JUDGE, rundir.CONFIG, rundir.METRICS])]


# ----------------------------------------------------------------------------- readers refuse, in one line

@pytest.mark.parametrize("make", ["directory", "fifo", "dev_zero"])
def test_json_readers_refuse_non_regular_files_at_once(tmp_path, make):
    path = tmp_path / "metrics.json"
    {"directory": lambda: path.mkdir(), "fifo": lambda: os.mkfifo(path),
     "dev_zero": lambda: path.symlink_to("/dev/zero")}[make]()
    started = time.monotonic()
    with pytest.raises(DsdrError, match=r"metrics\.json: .*(directory|not a regular file)"):
        read_json(path)
    assert time.monotonic() - started < 5


def test_json_readers_cap_the_size(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[" + "0," * 100 + "0]")
    with pytest.raises(DsdrError, match="over the 50-byte limit"):
        read_json(path, max_bytes=50)


def _metrics_with(run: Path, text: str) -> None:
    data = json.loads((run / "metrics.json").read_text())
    data["benchmarks"]["math500"]["zz"] = "@@"
    (run / "metrics.json").write_text(json.dumps(data).replace('"zz": "@@"', text))


@pytest.mark.parametrize("text, field", [
    ('"pass@k": {"\\u00b2": 0.5}', "pass@k"), ('"pass@k": {"' + "9" * 400 + '": 0.5}', "pass@k"),
    ('"pass1": NaN', "pass1"), ('"pass1": Infinity', "pass1"), ('"pass1": -Infinity', "pass1"),
    ('"pass1": -5.0', "pass1"), ('"avg@n": 7', "avg@n"), ('"pass1": 1e400', "pass1"),
    ('"mean_completion_tokens": NaN', "mean_completion_tokens"),
    ('"mean_completion_tokens": Infinity', "mean_completion_tokens"),
    ('"ci95": {"pass1": [0.9, 0.1]}', "ci95.pass1"), ('"ci95": {"pass1": [NaN, 0.5]}', "ci95.pass1"),
])
def test_report_refuses_bad_metric_values_in_one_line(run_copy, tmp_path, capsys, text, field):
    _metrics_with(run_copy, text)
    code = cli_main(["report", str(run_copy), "--out", str(tmp_path / "rep"), "--no-compare"])
    line = one_error_line(capsys)
    assert code == 2 and "metrics.json" in line and field in line, line
    assert not (tmp_path / "rep" / "README.md").exists()


@pytest.mark.parametrize("key, value", [
    (("protocol", "phases"), 5), (("protocol", "phases"), {"a": 1}), (("protocol", "phases"), [{"phase": 1}]),
    (("protocol", "phases"), [{"phase": "p", "n": "x"}]), (("protocol", "max_tokens"), "x"),
    (("versions",), "x"), (("versions",), [1, 2]), (("mixed_settings",), 5), (("mixed_settings",), [{}]),
    (("template",), 5), (("backend",), ["x"]),
])
def test_report_refuses_config_fields_of_the_wrong_type(run_copy, tmp_path, capsys, key, value):
    config = json.loads((run_copy / "config.json").read_text())
    node = config
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = value
    (run_copy / "config.json").write_text(json.dumps(config))
    code = cli_main(["report", str(run_copy), "--out", str(tmp_path / "rep"), "--no-compare"])
    line = one_error_line(capsys)
    assert code == 2 and "config.json" in line and key[0] in line, line


@pytest.mark.parametrize("drop", ["name", "model", "step", "status", "run_dir"])
def test_sweep_json_entries_missing_a_key_are_refused(tmp_path, drop):
    from dsdr_eval.rundir import sweepdir

    record = {"kind": "sweep", "eval": {}, "checkpoints": [
        {"name": "step_000001", "step": 1, "model": "/m", "run_dir": "step_000001", "status": "done"}]}
    del record["checkpoints"][0][drop]
    write_json(tmp_path / "sweep.json", record)
    with pytest.raises(DsdrError, match=rf"sweep\.json: checkpoints\[0\]\.{drop}"):
        sweepdir.load_sweep(tmp_path)


def test_an_os_error_of_any_writer_is_one_line(run_copy, tmp_path, monkeypatch, capsys):
    """A read-only output directory (root ignores modes, so the error is injected): exit 2, one line."""
    from dsdr_eval.rundir import jsonl

    def denied(path, chunks):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr(jsonl, "atomic_temp", denied)
    code = cli_main(["report", str(run_copy), "--out", str(tmp_path / "rep"), "--no-compare"])
    line = one_error_line(capsys)
    assert code == 2 and "Permission denied" in line and "rep" in line, line


# ----------------------------------------------------------------------------- umask

@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_atomic_writes_follow_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        write_json(tmp_path / "metrics.json", {"a": 1})
        rundir.commit_files(tmp_path, {"graded.jsonl": b"{}\n"})
    finally:
        os.umask(old)
    for name in ("metrics.json", "graded.jsonl"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~mask


# ----------------------------------------------------------------------------- escaping

HOSTILE = "![x](http://127.0.0.1:9/img.png) <img src=x> a | b **b** $\\href{u}{v}$"


def test_report_shows_labels_and_benchmark_names_literally(run_copy, tmp_path):
    data = json.loads((run_copy / "metrics.json").read_text())
    data["benchmarks"] = {HOSTILE: data["benchmarks"]["math500"]}
    (run_copy / "metrics.json").write_text(json.dumps(data))
    assert cli_main(["report", str(run_copy), "--out", str(tmp_path / "rep"), "--no-compare",
                     "--label", HOSTILE]) == 0
    for name in ("README.md", "table1.md"):
        text = (tmp_path / "rep" / name).read_text()
        text = re.sub(r"```bash\n.*?\n```", "", text, flags=re.S)  # the command line, verbatim in a code block
        for raw in ("![x](", "<img", "a | b", "**b**", "$\\href"):
            assert raw not in text, (name, raw)
        assert "\\!\\[x\\](http://127.0.0.1:9/img.png) &lt;img src=x&gt; a \\| b" in text


def test_formula_chips_hold_no_markup():
    from collections import Counter

    from dashboards.views.samples import _formula_chips

    formulas = frozenset({"$![x](http://host/img.png)$", "<img src=http://host/a.png>", ":red[x]", "x_1*y_2"})
    html = _formula_chips(formulas, Counter({f: 1 for f in formulas}))
    for raw in ("![", "](", "<img", "$", ":red[", "_1*"):
        assert raw not in html, raw
    assert html.count("<code ") == 4


def test_a_reply_nested_200000_deep_is_a_bad_reply_not_a_recursion_error():
    from dsdr_eval.openai_api.sdk import completion_body_problem

    problem = completion_body_problem(b"[" * 200_000 + b"]" * 200_000)
    assert problem is not None and problem.startswith("body is not a JSON completion object")
