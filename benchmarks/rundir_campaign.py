"""Run-directory reliability campaign (issue 24): concurrency, a broken checkpoint in a sweep,
consistency after a failed write, clean errors of the readers, report escaping, dashboard chips, umask.

Every case runs the CLI in a subprocess (``python -m dsdr_eval.cli``; the code under test is the
``dsdr_eval`` that PYTHONPATH imports) and is ``clean`` when the outcome is the documented one:

* concurrency: of two writers started together on one directory, one is refused (exit 2, one line
  naming the directory and the holder's pid) and the directory holds each sample once;
* sweep: a checkpoint with a 10-byte model.safetensors is recorded as ``error`` in sweep.json and the
  next checkpoint is still evaluated (exit 2, no traceback);
* import: ``kill -9`` at each moment of an import's commit (while each of its three files is written,
  at each of its three renames) leaves a directory the rerun of the import completes or refuses in one
  line, holding exactly what an uninterrupted import writes;
* consistency: a full disk (OSError 28 injected on the k-th file written) or ``kill -9`` between two
  renames leaves graded.jsonl / metrics.json (judge: judge.jsonl / metrics.json / config.json) all old
  or all new, as a reader sees them, and no temp file is left once the next writer ran (a reader cannot
  tell a dead writer's temps from a live one's); the failed command exits 2 in one line;
* clean errors: a malformed config.json / metrics.json / sweep.json (wrong types, a directory, a FIFO,
  /dev/zero, bad ``pass@k`` keys, NaN / Infinity / -5.0 / a reversed CI) or an OS error on an input or
  an output (EACCES, ENOSPC injected) ends in exit 2 with one ``error: FILE...`` line within 60 s;
* report escaping: a label / benchmark name holding Markdown (an image, HTML, a table pipe) is shown
  literally in the report's README.md;
* dashboard: a formula chip of a hostile completion holds no Markdown image, HTML tag or math opener;
* umask: files written by ``score`` have mode 0666 & ~umask.

Usage: PYTHONPATH=REPO python benchmarks/rundir_campaign.py [--only AREA] [--json OUT.json]
(the tests/ helpers are this checkout's). Needs $DSDR_DATA_DIR (math500.jsonl) and, for the sweep
area, the SmolLM2 tokenizer that tests/helpers/models.py ``build_tiny_random_llama`` uses.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from helpers.fault_server import FaultServer  # noqa: E402
from helpers.faults import fault_argv  # noqa: E402
from helpers.fixtures_runs import judge_reply_for, write_eval_samples  # noqa: E402

DATA_DIR = Path(os.environ.get("DSDR_DATA_DIR", REPO.parent / "shared" / "data" / "benchmarks"))
PY = sys.executable
ONE_LINE_ERROR = re.compile(r"^(dsdr-train: )?error: .+$")


def cli(*args: str, timeout: float = 300, fault: tuple[str, int, int, str | None] | None = None,
        umask: int | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    command = [PY, "-m", "dsdr_eval.cli", *args] if fault is None else fault_argv(fault, args)
    preexec = (lambda: os.umask(umask)) if umask is not None else None
    try:
        return subprocess.run(command, capture_output=True, text=True, errors="backslashreplace", timeout=timeout,
                              preexec_fn=preexec, cwd=cwd)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, -999, "", "timeout")


def one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> bool:
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("warning:")]
    return (proc.returncode == 2 and "Traceback" not in proc.stderr and len(lines) == 1
            and bool(ONE_LINE_ERROR.match(lines[0])) and all(n in lines[0] for n in needles))


def scored_run(root: Path, name: str, problems: int = 2) -> Path:
    run = write_eval_samples(root / name, DATA_DIR, label=name, accuracy=0.5, benchmarks={"math500": problems})
    proc = cli("score", str(run), "--workers", "1", "--bootstrap", "0", "--no-progress")
    if proc.returncode != 0:
        raise RuntimeError(f"fixture {name}: score failed: {proc.stderr[-500:]}")
    return run


def temps(run: Path) -> list[str]:
    return sorted(p.name for p in run.iterdir() if p.name.endswith(".tmp"))


# ----------------------------------------------------------------------------- concurrency

def _two(start: Callable[[], subprocess.Popen], delay_s: float = 1.5) -> tuple[list[int], list[str]]:
    first = start()
    time.sleep(delay_s)
    second = start()
    outs = [p.communicate(timeout=600) for p in (first, second)]
    return [first.returncode, second.returncode], [err for _, err in outs]


def _popen(*args: str) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "dsdr_eval.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="backslashreplace")


def _refused(codes: list[int], errs: list[str], run: Path) -> bool:
    """One writer ran (exit 0), the other was refused: exit 2, one line naming the dir and a pid."""
    if sorted(codes) != [0, 2]:
        return False
    err = errs[codes.index(2)]
    lines = [line for line in err.splitlines() if line.strip()]
    return len(lines) == 1 and str(run) in lines[0] and "pid" in lines[0] and "Traceback" not in err


def _no_duplicates(path: Path) -> bool:
    keys = Counter()
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            keys[(r.get("benchmark"), r.get("problem_id"), r.get("phase"), r.get("sample_idx"))] += 1
    return bool(keys) and max(keys.values()) == 1


def case_two_runs(root: Path) -> tuple[bool, str]:
    out = root / "two_runs"
    with FaultServer(default="timeout", delay_s=0.4, reply="The answer is \\boxed{1}.") as server:
        args = ("run", "--model", server.model, "--backend", "openai", "--base-url", server.base_url,
                "--benchmarks", "math500", "--limit", "2", "--protocol", "quick", "--n", "4", "--max-tokens", "16",
                "--data-dir", str(DATA_DIR), "--out", str(out), "--no-diversity", "--no-progress",
                "--grading-workers", "1", "--max-concurrency", "1")
        codes, errs = _two(lambda: _popen(*args))
    ok = _refused(codes, errs, out) and _no_duplicates(out / "samples.jsonl")
    return ok, f"exit codes {codes}; duplicates: {not _no_duplicates(out / 'samples.jsonl')}"


def case_two_scores(root: Path) -> tuple[bool, str]:
    run = write_eval_samples(root / "two_scores", DATA_DIR, label="x", accuracy=0.5, benchmarks={"math500": 6})
    codes, errs = _two(lambda: _popen("score", str(run), "--workers", "1", "--bootstrap", "200", "--no-progress"),
                       delay_s=0.3)
    return _refused(codes, errs, run), f"exit codes {codes}"


def case_two_imports(root: Path) -> tuple[bool, str]:
    source = root / "import_src.jsonl"
    with source.open("w") as fh:
        for i in range(4000):
            fh.write(json.dumps({"id": f"p{i}", "answer": str(i), "completion": f"\\boxed{{{i}}}" * 50}) + "\n")
    out = root / "two_imports"
    codes, errs = _two(lambda: _popen("import", "--from", "jsonl", str(source), "--out", str(out)), delay_s=0.3)
    # Serialised either way: the loser is refused by the lock, or (when it reached the lock after the
    # winner had finished) by import's own "samples.jsonl already exists"; the file holds each line once.
    loser = errs[codes.index(2)].strip() if 2 in codes else ""
    serial = (sorted(codes) == [0, 2] and "Traceback" not in loser and len(loser.splitlines()) == 1
              and ("pid" in loser or "already exists" in loser))
    ok = serial and _no_duplicates(out / "samples.jsonl")
    return ok, f"exit codes {codes}; loser: {loser[-120:]!r}"


def case_two_judges(root: Path) -> tuple[bool, str]:
    run = scored_run(root, "two_judges")
    with FaultServer(default="timeout", delay_s=0.3, reply=judge_reply_for) as server:
        args = ("judge", str(run), "--judge-base-url", server.base_url, "--judge-model", server.model,
                "--no-progress", "--no-cache")
        codes, errs = _two(lambda: _popen(*args), delay_s=0.5)
    return _refused(codes, errs, run), f"exit codes {codes}"


def case_lock_after_kill9(root: Path) -> tuple[bool, str]:
    """A writer killed by SIGKILL leaves its lock file: the next writer must not be refused."""
    run = write_eval_samples(root / "after_kill", DATA_DIR, label="x", accuracy=0.5, benchmarks={"math500": 6})
    first = _popen("score", str(run), "--workers", "1", "--bootstrap", "2000", "--no-progress")
    time.sleep(2.0)
    first.kill()
    first.wait()
    proc = cli("score", str(run), "--workers", "1", "--bootstrap", "0", "--no-progress")
    return proc.returncode == 0, f"rerun after kill -9: exit {proc.returncode} {proc.stderr.strip()[-200:]}"


# ----------------------------------------------------------------------------- sweep

def case_sweep_broken_checkpoint(root: Path) -> tuple[bool, str]:
    from dsdr_eval.models import smollm2_hf_dir
    from helpers.models import build_tiny_random_llama

    model = build_tiny_random_llama(root / "tiny", smollm2_hf_dir())
    train = root / "train"
    (train / "checkpoints").mkdir(parents=True)
    (train / "config.json").write_text(json.dumps({"kind": "train", "algo": "dsdr", "label": "t",
                                                   "config": {"algo": "dsdr"}}))
    for step in (1, 2):
        shutil.copytree(model, train / "checkpoints" / f"step_{step:06d}")
    weights = next((train / "checkpoints" / "step_000001").glob("*.safetensors"))
    weights.write_bytes(b"0123456789")  # 10 bytes: a truncated copy
    out = root / "sweep"
    proc = cli("sweep", str(train), "--out", str(out), "--backend", "hf", "--device", "cpu", "--benchmarks",
               "math500", "--limit", "1", "--n", "2", "--max-tokens", "4", "--protocol", "quick", "--no-progress",
               "--no-diversity", "--grading-workers", "1", "--data-dir", str(DATA_DIR), timeout=600)
    try:
        record = json.loads((out / "sweep.json").read_text())
        status = {e["name"]: e["status"] for e in record["checkpoints"]}
    except (OSError, ValueError, KeyError):
        status = {}
    ok = (proc.returncode == 2 and "Traceback" not in proc.stderr and status.get("step_000001") == "error"
          and status.get("step_000002") == "done")
    return ok, f"exit {proc.returncode}, statuses {status}"


# ----------------------------------------------------------------------------- consistency

def _consistent_score(run: Path, before: dict[str, bytes]) -> tuple[bool, str]:
    """graded.jsonl and metrics.json, as a reader sees them, are both the old ones or both new and
    matching (metrics' n_samples = graded rows); no temp file once the next writer has run."""
    cli("report", str(run), "--out", str(run.parent / f"{run.name}_report"), "--no-compare")  # a reader
    now = {name: (run / name).read_bytes() for name in before}
    stray = _temps_after_next_writer(run)
    if now == before:
        return not stray, f"old state kept; temps {stray}"
    if now["graded.jsonl"] == before["graded.jsonl"] or now["metrics.json"] == before["metrics.json"]:
        return False, "half updated: one of graded.jsonl / metrics.json is new, the other old"
    rows = sum(1 for line in now["graded.jsonl"].splitlines() if line.strip())
    n = json.loads(now["metrics.json"])["provenance"].get("n_samples")
    return rows == n and not stray, f"new state: {rows} rows, metrics n_samples {n}; temps {stray}"


def _rescore_case(root: Path, name: str, fault: tuple[str, int, int, str | None]) -> tuple[bool, str]:
    run = scored_run(root, name, problems=2)
    # more samples since the last score: the new graded.jsonl differs from the old one
    extra = write_eval_samples(root / f"{name}_more", DATA_DIR, label=name, accuracy=0.5, benchmarks={"math500": 3})
    shutil.copy(extra / "samples.jsonl", run / "samples.jsonl")
    before = {name_: (run / name_).read_bytes() for name_ in ("graded.jsonl", "metrics.json")}
    proc = cli("score", str(run), "--workers", "1", "--bootstrap", "0", "--no-progress", fault=fault)
    ok, detail = _consistent_score(run, before)
    if fault[0] == "write":  # the command fails in one line (or never wrote that many files: exit 0)
        ok = ok and (proc.returncode == 0 or one_line_error(proc))
    return ok, f"exit {proc.returncode}; {detail}"


def _temps_after_next_writer(run: Path) -> list[str]:
    """Temp files a killed writer left, once the next writer of the directory has run (a `score`: a
    reader cannot tell a dead writer's temps from a live one's; the next writer can)."""
    cli("score", str(run), "--workers", "1", "--bootstrap", "0", "--no-progress")
    return temps(run)


def _judge_consistent(run: Path, before: dict[str, bytes]) -> tuple[bool, str]:
    cli("report", str(run), "--out", str(run.parent / f"{run.name}_report"), "--no-compare")
    now = {name: (run / name).read_bytes() if (run / name).exists() else b"" for name in before}
    changed = {name for name in before if now[name] != before[name]}
    stray = _temps_after_next_writer(run)
    return changed in (set(), set(before)) and not stray, f"changed {sorted(changed)}; temps {stray}"


def _judge_case(root: Path, name: str, fault: tuple[str, int, int, str | None]) -> tuple[bool, str]:
    run = scored_run(root, name)
    with FaultServer(reply=judge_reply_for) as server:
        first = cli("judge", str(run), "--judge-base-url", server.base_url, "--judge-model", server.model,
                    "--no-progress", "--no-cache", "--benchmarks", "math500")
        if first.returncode != 0:
            return False, f"first judge failed: {first.stderr[-300:]}"
        before = {n: (run / n).read_bytes() for n in ("judge.jsonl", "metrics.json", "config.json")}
        proc = cli("judge", str(run), "--judge-base-url", server.base_url, "--judge-model", server.model,
                   "--no-progress", "--no-cache", "--benchmarks", "math500", "--judge-temperature", "0.5", fault=fault)
    ok, detail = _judge_consistent(run, before)
    if fault[0] == "write":
        ok = ok and (proc.returncode == 0 or one_line_error(proc))
    return ok, f"exit {proc.returncode}; {detail}"


def _import_case(root: Path, fault: tuple[str, int, int, str | None]) -> tuple[bool, str]:
    """An import killed at one moment of its commit; the same import rerun: it imports (exit 0) or finds
    the killed import completed and refuses in one line; the directory then holds exactly the run an
    uninterrupted import writes (same samples.jsonl bytes), no temp file, no commit record."""
    source = root / "src.jsonl"
    with source.open("w") as fh:
        for i in range(200):
            fh.write(json.dumps({"id": f"p{i}", "answer": str(i), "completion": f"so \\boxed{{{i}}}"}) + "\n")
    clean, run = root / "clean", root / "run"
    cli("import", "--from", "jsonl", str(source), "--out", str(clean))
    killed = cli("import", "--from", "jsonl", str(source), "--out", str(run), fault=fault)
    rerun = cli("import", "--from", "jsonl", str(source), "--out", str(run))
    names = sorted(p.name for p in run.iterdir()) if run.is_dir() else []
    same = names == ["config.json", "samples.jsonl"] and \
        (run / "samples.jsonl").read_bytes() == (clean / "samples.jsonl").read_bytes()
    ok = (killed.returncode == -9 and same
          and (rerun.returncode == 0 or one_line_error(rerun, "samples.jsonl: already exists")))
    return ok, f"killed: exit {killed.returncode}; rerun: exit {rerun.returncode}; files {names}"


# ----------------------------------------------------------------------------- clean errors of readers

def _report(run: Path, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return cli("report", str(run), "--out", str(run.parent / f"{run.name}_report"), "--no-compare", *extra,
               timeout=timeout)


def _edit_json(path: Path, edit: Callable[[Any], Any]) -> None:
    data = json.loads(path.read_text())
    path.write_text(json.dumps(edit(data)))


def _set(keys: tuple, value: Any) -> Callable[[Any], Any]:
    def apply(data: Any) -> Any:
        node = data
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
        return data
    return apply


def _nonfinite_metrics(path: Path, text: str) -> None:
    raw = path.read_text()
    data = json.loads(raw)
    data["benchmarks"]["math500"]["pass1"] = "@@"
    path.write_text(json.dumps(data).replace('"@@"', text))


def reader_cases(base: Path) -> dict[str, Callable[[Path], tuple[bool, str]]]:
    def report_case(mutate: Callable[[Path], None], *needles: str) -> Callable[[Path], tuple[bool, str]]:
        def run_case(root: Path) -> tuple[bool, str]:
            run = shutil.copytree(base, root / "run")
            mutate(run)
            proc = _report(run)
            ok = one_line_error(proc, *needles)
            return ok, f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1][:160]}"
        return run_case

    def replace_with(name: str, make: Callable[[Path], None]) -> Callable[[Path], None]:
        def mutate(run: Path) -> None:
            (run / name).unlink()
            make(run / name)
        return mutate

    cfg = lambda keys, value: (lambda run: _edit_json(run / "config.json", _set(keys, value)))  # noqa: E731
    met = lambda keys, value: (lambda run: _edit_json(run / "metrics.json", _set(keys, value)))  # noqa: E731
    cases = {
        "config protocol.phases = 5": report_case(cfg(("protocol", "phases"), 5), "config.json"),
        "config protocol.phases = {}": report_case(cfg(("protocol", "phases"), {"a": 1}), "config.json"),
        "config protocol.phases[0].n = 'x'": report_case(cfg(("protocol", "phases"), [{"phase": "p", "n": "x"}]),
                                                         "config.json"),
        "config versions = 'x'": report_case(cfg(("versions",), "x"), "config.json"),
        "config versions = [1, 2]": report_case(cfg(("versions",), [1, 2]), "config.json"),
        "config mixed_settings = 5": report_case(cfg(("mixed_settings",), 5), "config.json"),
        "config template = 5": report_case(cfg(("template",), 5), "config.json"),
        "metrics.json is a directory": report_case(replace_with("metrics.json", lambda p: p.mkdir()), "metrics.json"),
        "config.json is a directory": report_case(replace_with("config.json", lambda p: p.mkdir()), "config.json"),
        "metrics.json is a FIFO": report_case(replace_with("metrics.json", lambda p: os.mkfifo(p)), "metrics.json"),
        "config.json is a FIFO": report_case(replace_with("config.json", lambda p: os.mkfifo(p)), "config.json"),
        "metrics.json -> /dev/zero": report_case(replace_with("metrics.json", lambda p: p.symlink_to("/dev/zero")),
                                                 "metrics.json"),
        "pass@k key '²'": report_case(met(("benchmarks", "math500", "pass@k"), {"²": 0.5}), "metrics.json"),
        "pass@k key of 400 digits": report_case(met(("benchmarks", "math500", "pass@k"), {"9" * 400: 0.5}),
                                                "metrics.json"),
        "pass1 NaN": report_case(lambda run: _nonfinite_metrics(run / "metrics.json", "NaN"), "metrics.json"),
        "pass1 Infinity": report_case(lambda run: _nonfinite_metrics(run / "metrics.json", "Infinity"),
                                      "metrics.json"),
        "pass1 -Infinity": report_case(lambda run: _nonfinite_metrics(run / "metrics.json", "-Infinity"),
                                       "metrics.json"),
        "pass1 -5.0": report_case(met(("benchmarks", "math500", "pass1"), -5.0), "metrics.json"),
        "pass1 1e400": report_case(lambda run: _nonfinite_metrics(run / "metrics.json", "1e400"), "metrics.json"),
        "ci95 reversed": report_case(met(("benchmarks", "math500", "ci95"), {"pass1": [0.9, 0.1]}), "metrics.json"),
        "ci95 bound NaN": report_case(lambda run: _edit_raw(run / "metrics.json", "ci95", '{"pass1": [NaN, 0.5]}'),
                                      "metrics.json"),
        "avg@n 7 (not a fraction)": report_case(met(("benchmarks", "math500", "avg@n"), 7), "metrics.json"),
    }

    def unreadable(name: str) -> Callable[[Path], tuple[bool, str]]:
        def run_case(root: Path) -> tuple[bool, str]:
            run = shutil.copytree(base, root / "run")
            proc = cli("report", str(run), "--out", str(root / "rep"), "--no-compare", fault=("open", 0, 0, name))
            return one_line_error(proc, name), f"exit {proc.returncode}: {proc.stderr.strip()[-160:]}"
        return run_case

    def report_enospc(root: Path) -> tuple[bool, str]:
        run = shutil.copytree(base, root / "run")
        proc = cli("report", str(run), "--out", str(root / "rep"), "--no-compare", fault=("write", 1, 28, None))
        return one_line_error(proc), f"exit {proc.returncode}: {proc.stderr.strip()[-160:]}"

    def score_eacces_out(root: Path) -> tuple[bool, str]:
        run = shutil.copytree(base, root / "run")
        proc = cli("score", str(run), "--workers", "1", "--bootstrap", "0", "--no-progress",
                   fault=("write", 1, 13, None))
        return one_line_error(proc), f"exit {proc.returncode}: {proc.stderr.strip()[-160:]}"

    cases.update({
        "config.json unreadable (EACCES)": unreadable("config.json"),
        "metrics.json unreadable (EACCES)": unreadable("metrics.json"),
        "samples.jsonl unreadable (EACCES), score": lambda root: _score_unreadable(base, root),
        "report output full (ENOSPC)": report_enospc,
        "score output read-only (EACCES on write)": score_eacces_out,
    })
    return cases


def _edit_raw(path: Path, key: str, text: str) -> None:
    data = json.loads(path.read_text())
    data["benchmarks"]["math500"][key] = "@@"
    path.write_text(json.dumps(data).replace('"@@"', text))


def _score_unreadable(base: Path, root: Path) -> tuple[bool, str]:
    run = shutil.copytree(base, root / "run")
    proc = cli("score", str(run), "--workers", "1", "--bootstrap", "0", "--no-progress",
               fault=("open", 0, 0, "samples.jsonl"))
    return one_line_error(proc, "samples.jsonl"), f"exit {proc.returncode}: {proc.stderr.strip()[-160:]}"


def sweep_json_cases() -> dict[str, Callable[[Path], tuple[bool, str]]]:
    """A rerun of `dsdr-eval sweep` reads SWEEP_DIR/sweep.json first (before any model is loaded)."""
    def case(mutate: Callable[[dict], Any] | None, make: Callable[[Path], None] | None = None):
        def run_case(root: Path) -> tuple[bool, str]:
            train = root / "train"
            (train / "checkpoints" / "step_000001").mkdir(parents=True)
            (train / "checkpoints" / "step_000001" / "config.json").write_text("{}")
            (train / "config.json").write_text(json.dumps({"kind": "train", "algo": "dsdr", "config": {}}))
            out = root / "sweep"
            out.mkdir()
            record = {"kind": "sweep", "label": "t", "eval": {}, "every": 1, "include_final": False,
                      "train_run": {"path": str(train)}, "steps": [1],
                      "checkpoints": [{"name": "step_000001", "step": 1, "model": str(train / "checkpoints" /
                                                                                       "step_000001"),
                                       "run_dir": "step_000001", "status": "pending"}]}
            if mutate is not None:
                mutate(record)
                (out / "sweep.json").write_text(json.dumps(record))
            else:
                make(out / "sweep.json")
            proc = cli("sweep", str(train), "--out", str(out), "--backend", "hf", "--benchmarks", "math500",
                       "--limit", "1", "--data-dir", str(DATA_DIR), "--no-progress", timeout=120)
            return one_line_error(proc, "sweep.json"), f"exit {proc.returncode}: {proc.stderr.strip()[-160:]}"
        return run_case

    def drop(key: str) -> Callable[[dict], None]:
        return lambda record: record["checkpoints"][0].pop(key)

    return {
        "sweep.json entry without 'name'": case(drop("name")),
        "sweep.json entry without 'model'": case(drop("model")),
        "sweep.json entry without 'step'": case(drop("step")),
        "sweep.json entry without 'status'": case(drop("status")),
        "sweep.json is a directory": case(None, lambda p: p.mkdir()),
        "sweep.json is a FIFO": case(None, lambda p: os.mkfifo(p)),
        "sweep.json -> /dev/zero": case(None, lambda p: p.symlink_to("/dev/zero")),
    }


# ----------------------------------------------------------------------------- report escaping, dashboard, umask

HOSTILE = ["![x](http://127.0.0.1:9/img.png)", "<img src=http://127.0.0.1:9/a.png>", "a | b", "$\\href{x}{y}$",
           "**bold** _it_ `code`"]


def escaping_cases(base: Path) -> dict[str, Callable[[Path], tuple[bool, str]]]:
    def label_case(text: str, where: str) -> Callable[[Path], tuple[bool, str]]:
        def run_case(root: Path) -> tuple[bool, str]:
            run = shutil.copytree(base, root / "run")
            if where == "label":
                extra: tuple[str, ...] = ("--label", text)
            else:
                extra = ()
                _edit_json(run / "metrics.json", lambda m: {**m, "benchmarks": {text: m["benchmarks"]["math500"]}})
            proc = cli("report", str(run), "--out", str(root / "rep"), "--no-compare", *extra)
            if proc.returncode != 0:
                return False, f"exit {proc.returncode}: {proc.stderr.strip()[-160:]}"
            readme = (root / "rep" / "README.md").read_text() + (root / "rep" / "table1.md").read_text()
            readme = re.sub(r"```+bash\n.*?\n```+", "", readme, flags=re.S)  # the command line, verbatim in a code block
            bad = [t for t in ("![x](", "<img", "a | b", "**bold**", "$\\href") if t in readme]
            return not bad, f"raw in README.md: {bad}"
        return run_case

    cases = {f"report {where} {text[:24]!r}": label_case(text, where) for where in ("label", "benchmark")
             for text in HOSTILE}

    def chips(root: Path) -> tuple[bool, str]:
        code = ("from collections import Counter; from dashboards.views.samples import _formula_chips;"
                f"fs={HOSTILE + ['$![x](http://host/img.png)$', ':red[x]']!r};"
                "print(_formula_chips(frozenset(fs), Counter({f: 1 for f in fs})))")
        proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, cwd=root)  # not REPO: PYTHONPATH decides
        html = proc.stdout
        bad = [t for t in ("![", "<img", "$", "](http", ":red[") if t in html]
        return proc.returncode == 0 and not bad, f"raw in chips: {bad} {proc.stderr[-200:]}"

    cases["dashboard formula chips"] = chips
    return cases


def umask_cases(root_base: Path) -> dict[str, Callable[[Path], tuple[bool, str]]]:
    def case(mask: int) -> Callable[[Path], tuple[bool, str]]:
        def run_case(root: Path) -> tuple[bool, str]:
            run = write_eval_samples(root / "run", DATA_DIR, label="u", accuracy=0.5, benchmarks={"math500": 2})
            proc = cli("score", str(run), "--workers", "1", "--bootstrap", "0", "--no-progress", umask=mask)
            modes = {n: stat.S_IMODE((run / n).stat().st_mode) for n in ("graded.jsonl", "metrics.json")
                     if (run / n).exists()}
            want = 0o666 & ~mask
            return proc.returncode == 0 and set(modes.values()) == {want}, \
                f"umask {mask:03o}: modes {{{', '.join(f'{k}: {v:o}' for k, v in modes.items())}}} want {want:o}"
        return run_case

    return {f"score under umask {m:03o}": case(m) for m in (0o022, 0o002, 0o077)}


# ----------------------------------------------------------------------------- driver

def build(root: Path) -> dict[str, dict[str, Callable[[Path], tuple[bool, str]]]]:
    base = scored_run(root, "base", problems=2)
    write = lambda k: ("write", k, 28, None)  # noqa: E731
    return {
        "concurrency": {"two `run` (openai, 1.5 s apart)": case_two_runs, "two `score`": case_two_scores,
                        "two `import`": case_two_imports, "two `judge`": case_two_judges,
                        "writer after a kill -9'd writer": case_lock_after_kill9},
        "sweep": {"10-byte model.safetensors, then a good checkpoint": case_sweep_broken_checkpoint},
        "consistency": {
            **{f"score: ENOSPC on file {k}": (lambda r, k=k: _rescore_case(r, f"score_w{k}", write(k)))
               for k in (1, 2, 3)},
            **{f"score: kill -9 at rename {k}": (lambda r, k=k: _rescore_case(r, f"score_r{k}", ("replace", k, 0, None)))
               for k in (1, 2, 3)},
            **{f"judge: ENOSPC on file {k}": (lambda r, k=k: _judge_case(r, f"judge_w{k}", write(k)))
               for k in (1, 2, 3, 4)},
            **{f"judge: kill -9 at rename {k}": (lambda r, k=k: _judge_case(r, f"judge_r{k}", ("replace", k, 0, None)))
               for k in (1, 2, 3)},
        },
        "import": {f"import: kill -9 {'during file' if mode == 'kill-write' else 'at rename'} {k}":
                   (lambda r, mode=mode, k=k: _import_case(r, (mode, k, 0, None)))
                   for mode, ks in (("kill-write", (1, 2, 3)), ("replace", (1, 2, 3))) for k in ks},
        "clean errors": {**reader_cases(base), **sweep_json_cases()},
        "report/dashboard escaping": escaping_cases(base),
        "umask": umask_cases(root),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", help="run only this area (repeatable)")
    parser.add_argument("--json", help="write every case's outcome here")
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="rundir_campaign_") as tmp:
        root = Path(tmp)
        areas = build(root)
        for area, cases in areas.items():
            if args.only and area not in args.only:
                continue
            for index, (name, run_case) in enumerate(cases.items()):
                work = root / f"{re.sub(r'[^a-z]+', '_', area)}_{index}"
                work.mkdir()
                try:
                    ok, detail = run_case(work)
                except Exception as exc:  # a case that crashes the harness counts as not clean
                    ok, detail = False, f"harness: {type(exc).__name__}: {exc}"
                results.setdefault(area, []).append({"case": name, "clean": ok, "detail": detail})
                print(f"[{area}] {'clean' if ok else 'NOT CLEAN'}: {name}: {detail}", flush=True)
    print("\n| area | cases | clean |\n|---|---:|---:|")
    for area, rows in results.items():
        print(f"| {area} | {len(rows)} | {sum(r['clean'] for r in rows)} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
