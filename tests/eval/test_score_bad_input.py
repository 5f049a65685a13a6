"""Bad input to `dsdr-eval score` (and the JSONL readers every subcommand shares): one line each.

The table is tests/helpers/bad_samples.py (88 one-bad-line files; benchmarks/bad_input_campaign.py runs the
same table through subprocesses and prints the before/after classification). Every bad line: exit 2,
one ``error: FILE:LINE:FIELD: message`` line, no traceback, found before any grading, nothing in --out
touched and no temp file left. Every accepted oddity that changes a number: a warning line.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.bad_samples import CASES, GOOD, Case
from dsdr_eval import cli
from dsdr_eval.scoring import score as scoring
from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.jsonl import append_jsonl, iter_jsonl, read_jsonl, repair_truncated_tail, write_json, write_jsonl
from dsdr_eval.rundir.samples import read_samples

REPO = Path(__file__).resolve().parents[2]
SENTINELS = {"graded.jsonl": b'{"kept": true}\n', "metrics.json": b'{"benchmarks": {}, "kept": true}\n'}
BAD = [c for c in CASES if c.expect == "error"]
ACCEPTED = [c for c in CASES if c.expect != "error"]


def _prepare(tmp_path: Path, case: Case) -> tuple[Path, Path]:
    samples = tmp_path / "samples.jsonl"
    samples.write_bytes(case.content())
    out = tmp_path / "out"
    out.mkdir()
    for name, data in SENTINELS.items():
        (out / name).write_bytes(data)
    return samples, out


def _where(samples: Path, case: Case) -> str:
    return re.escape(f"{samples}:{case.line}:" + (f"{case.field}:" if case.field else "")) + " "


def _score(samples: Path, out: Path) -> int:
    return cli.main(["score", str(samples), "--out", str(out), "--workers", "1", "--bootstrap", "0", "--no-progress"])


def test_the_table_covers_every_family():
    assert len(CASES) >= 51 and len(BAD) >= 51
    names = " ".join(c.name for c in CASES)
    for family in ("truncated", "garbage", "non_object", "invalid_utf8", "surrogate", "huge_int", "nan", "infinity",
                   "duplicate_key", "missing", "bom", "crlf", "blank", "tokens_negative", "tokens_string",
                   "benchmark_empty"):
        assert family in names, family


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.name)
def test_bad_line_is_one_clean_error_before_grading(tmp_path, monkeypatch, capsys, case):
    samples, out = _prepare(tmp_path, case)

    def no_grading(*args, **kwargs):
        raise AssertionError("grading started although the file has a bad line")

    monkeypatch.setattr(scoring, "prepare_grading", no_grading)  # extraction, in the prepare thread
    monkeypatch.setattr(scoring, "grade_prepared", no_grading)  # the workers
    assert _score(samples, out) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and re.match("error: " + _where(samples, case), err[0]), err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == SENTINELS  # nothing lost, no temp file


@pytest.mark.parametrize("case", ACCEPTED, ids=lambda c: c.name)
def test_accepted_oddity_warns_when_it_changes_a_number(tmp_path, capsys, case):
    samples, out = _prepare(tmp_path, case)
    assert _score(samples, out) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    if case.expect == "warn":
        assert any(re.match("warning: " + _where(samples, case), w) for w in warnings), err
    else:
        assert not warnings, err
    graded = [json.loads(line) for line in (out / "graded.jsonl").read_text(encoding="utf-8").splitlines()]
    skipped = case.name.startswith("truncated_tail") or not case.bad_line.strip()  # no record on the odd line
    assert len(graded) == (3 if skipped else 4)
    for name, value in case.graded:
        assert graded[case.record_index][name] == value, (name, graded[case.record_index])
    assert all(isinstance(row["gold"], str) for row in graded)  # golds reach the grader as text
    assert sorted(p.name for p in out.iterdir()) == ["graded.jsonl", "metrics.json"]


@pytest.mark.parametrize("name", ["surrogate_completion", "surrogate_gold", "huge_int_sample_idx", "deep_nesting"])
def test_cli_subprocess_prints_no_traceback(tmp_path, name):
    case = next(c for c in CASES if c.name == name)
    samples, out = _prepare(tmp_path, case)
    proc = subprocess.run([sys.executable, "-m", "dsdr_eval.cli", "score", str(samples), "--out", str(out),
                           "--workers", "1", "--bootstrap", "0", "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, errors="backslashreplace", timeout=300)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == (0 if case.expect == "warn" else 2), proc.stderr
    assert not list(out.glob("*.tmp"))


def test_many_surrogate_lines_give_one_warning_per_field(tmp_path):
    rows = [dict(GOOD[0], sample_idx=i, completion=f"\\boxed{{3}}\ud800{i}") for i in range(5)]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # ensure_ascii: \ud800 escapes
    warnings: list[str] = []
    loaded = read_samples(path, on_warning=warnings.append)
    assert [r.completion for r in loaded] == [f"\\boxed{{3}}\ufffd{i}" for i in range(5)]
    assert warnings == [f"{path}:1:completion: lone surrogate(s) (not valid Unicode) replaced by U+FFFD "
                        "(and on 4 more lines)"]


# ----------------------------------------------------------------------------- the shared writers/readers

def test_writers_survive_lone_surrogates_and_round_trip(tmp_path):
    record = {"completion": "a\ud800b", "\udfff": ["x\udc00"]}
    write_jsonl(tmp_path / "a.jsonl", [record])
    append_jsonl(tmp_path / "a.jsonl", [record])
    write_json(tmp_path / "m.json", record)
    assert read_jsonl(tmp_path / "a.jsonl") == [record, record]
    assert json.loads((tmp_path / "m.json").read_text(encoding="utf-8")) == record


def test_failed_write_leaves_no_temp_file_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "graded.jsonl"
    path.write_text('{"old": 1}\n')
    with pytest.raises(TypeError):
        write_jsonl(path, [{"ok": 1}, {"bad": object()}])
    with pytest.raises(TypeError):
        write_json(tmp_path / "graded.jsonl", {"bad": object()})
    assert path.read_text() == '{"old": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["graded.jsonl"]


def test_repair_truncated_tail_cuts_only_a_partial_record(tmp_path):
    path = tmp_path / "samples.jsonl"
    warnings: list[str] = []
    path.write_bytes(b'{"a": 1}\n{"a": 2, "b": "cut')
    assert repair_truncated_tail(path, on_warning=warnings.append) == len(b'{"a": 2, "b": "cut')
    assert path.read_bytes() == b'{"a": 1}\n' and warnings and f"{path}:2:" in warnings[0]
    path.write_bytes(b'{"a": 1}\n{"a": 2}')  # complete, only the newline is missing: kept
    assert repair_truncated_tail(path) == 0 and path.read_bytes() == b'{"a": 1}\n{"a": 2}\n'
    path.write_bytes(b'{"a": 1}\nrm -rf garbage')
    with pytest.raises(DsdrError, match=re.escape(f"{path}:2: invalid JSON")):
        repair_truncated_tail(path)
    assert path.read_bytes() == b'{"a": 1}\nrm -rf garbage'  # bad input is refused, not silently cut


def test_run_resume_reader_refuses_garbage_tail_and_duplicate_keys(tmp_path):
    from dsdr_eval.run.resume import open_samples

    path = tmp_path / "samples.jsonl"
    good = json.dumps({"benchmark": "b", "phase": "sampling", "problem_id": "p", "sample_idx": 0, "gold": "1",
                       "completion": "x"})
    path.write_text(good + "\nnot json")
    with pytest.raises(DsdrError, match=":2: invalid JSON"):
        open_samples(path).keys
    path.write_text(good + '\n{"problem_id": "p", "sample_idx": 1, "sample_idx": 0}\n')
    with pytest.raises(DsdrError, match=":2:sample_idx: duplicate key"):
        open_samples(path).keys
    path.write_text(good + '\n{"problem_id": "p", "sample_idx": 1, "comp')
    assert open_samples(path).keys == {("b", "sampling", "p", 0)}  # a killed append is redone


@pytest.mark.parametrize("line, message", [
    ('{"problem_id": "p", "correct": true, "correct": false}', ":2:correct: duplicate key"),
    ('{"problem_id": "p", "sample_idx": ' + "1" * 5000 + "}", ":2:sample_idx: integer literal of 5000 digits"),
    ('{"problem_id": "p", "x": ' + "[" * 50_000 + "]" * 50_000 + "}", ":2: invalid JSON"),
    (b'{"problem_id": "p\xff"}'.decode("latin-1"), ":2:problem_id: not valid UTF-8"),
])
def test_every_reader_refuses_the_same_bad_lines(tmp_path, line, message):
    path = tmp_path / "graded.jsonl"
    path.write_bytes(b'{"problem_id": "p", "correct": true}\n' + line.encode("latin-1") + b"\n")
    with pytest.raises(DsdrError, match=re.escape(message)):
        list(iter_jsonl(path, tolerate_truncated_tail=True))
