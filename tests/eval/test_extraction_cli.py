"""The extraction profile through the tools (issue 21): chosen on `run` / `score` (--extraction,
the protocol's, config.json's), recorded in config.json, metrics.json and the report; `score`
warns when a profile finds no answer in > 20 % of a benchmark, and prints each disagreement with
the source tool as one clipped line, the full list in RUN_DIR/disagreements.jsonl."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.extraction import EXTRACTION_RULES_VERSION
from dsdr_eval.rundir.jsonl import read_json, read_jsonl
from dsdr_eval.protocols import PROTOCOLS, load_protocol_file
from dsdr_eval.scoring.score import DISAGREEMENTS, score_run_dir

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsdr_eval.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def _run_openai(out: Path, data_dir: Path, server, **options):
    from dsdr_eval.run.evaluation import run_evaluation
    from dsdr_eval.options.commands import RunOptions

    return run_evaluation(RunOptions(model="m", backend="openai", base_url=[server.base_url], benchmarks=["math500"],
                                     limit=2, protocol="quick", n=2, max_tokens=16, data_dir=str(data_dir),
                                     out=str(out), no_diversity=True, no_progress=True, grading_workers=1, **options),
                          command=["test_extraction_cli"])


def test_run_and_score_choose_record_and_warn(tmp_path, data_dir, capsys):
    from helpers.fault_server import FaultServer

    out = tmp_path / "run"
    with FaultServer(reply="3 + 4 = 7 apples.\n#### 7") as server:
        assert _run_openai(out, data_dir, server, extraction="gsm8k").exit_code == 0
    config = read_json(out / "config.json")
    assert config["extraction"] == "gsm8k"
    grading = read_json(out / "metrics.json")["provenance"]["grading"]
    assert grading["extraction"] == "gsm8k" and grading["extraction_profile"]["extractors"] == ["gsm8k", "last_number"]
    assert {(r["extracted"], r["extraction"]) for r in read_jsonl(out / "graded.jsonl")} == {("7", "gsm8k")}
    assert "no answer" not in capsys.readouterr().err

    # score without --extraction: config.json's profile, again; the report names it
    score_run_dir(out, progress=False, bootstrap=0, workers=1)
    assert read_json(out / "metrics.json")["provenance"]["grading"]["extraction"] == "gsm8k"
    report = run_cli("report", str(out), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    assert f"extraction profile gsm8k, extraction rules v{EXTRACTION_RULES_VERSION}" in (tmp_path / "report" / "README.md").read_text()

    # score --extraction boxed: every sample has no answer -> one warning naming the profile, an
    # example and the profiles that read it; recorded, and the report says which profile
    proc = run_cli("score", str(out), "--extraction", "boxed", "--bootstrap", "0", "--workers", "1", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    warning = [line for line in proc.stderr.splitlines() if "no answer" in line]
    assert len(warning) == 1 and "math500: 6 of 6 samples (100%)" in warning[0]
    assert "extraction profile 'boxed'" in warning[0] and "sample 0 ends '3 + 4 = 7 apples.\\n#### 7'" in warning[0]
    assert "gsm8k, flexible, tool-output (--extraction)" in warning[0]  # tool-output falls back to the last number
    assert read_json(out / "metrics.json")["provenance"]["grading"]["extraction"] == "boxed"
    assert read_json(out / "config.json")["extraction"] == "gsm8k"  # an override is not a new run setting


def test_a_wrong_recorded_profile_is_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "samples.jsonl").write_text(json.dumps({"problem_id": "p", "gold": "1", "completion": "#### 1"}) + "\n")
    (run / "config.json").write_text(json.dumps({"kind": "eval", "extraction": "gsm9k"}))
    proc = run_cli("score", str(run), "--bootstrap", "0", "--workers", "1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{run / 'config.json'}:extraction: unknown extraction profile 'gsm9k'" in proc.stderr
    bad_flag = run_cli("score", str(run), "--extraction", "gsm9k")
    assert bad_flag.returncode == 2 and "--extraction" in bad_flag.stderr and "gsm9k" in bad_flag.stderr
    assert not (run / "metrics.json").exists()


def test_protocol_files_name_a_profile(tmp_path):
    good = tmp_path / "p.yaml"
    good.write_text("name: gsm\nphases:\n  - {phase: sampling, n: 2, temperature: 0.7, top_p: 1.0}\n"
                    "max_tokens: 64\nextraction: gsm8k\n")
    protocol = load_protocol_file(good)
    assert protocol.extraction == "gsm8k" and "extraction" not in protocol.to_config()  # not the run identity
    assert all(p.extraction == "boxed" for p in PROTOCOLS.values())
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("gsm8k", "[1]"))
    with pytest.raises(DsdrError, match=f"{bad}:extraction: unknown extraction profile"):
        load_protocol_file(bad)


def test_disagreements_are_one_clipped_line_each_and_listed_in_full(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    long_answer = "x" * 3000
    rows = [{"problem_id": f"p{i}", "gold": "1", "sample_idx": 0, "completion": f"Answer: {long_answer}{i}\nmore",
             "source_correct": True, "source_extracted": "y" * 2500} for i in range(12)]
    rows.append({"problem_id": "q", "gold": "1", "sample_idx": 0, "completion": "\\boxed{1}", "source_correct": True})
    (run / "samples.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    proc = run_cli("score", str(run), "--bootstrap", "0", "--workers", "1", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    out_lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(out_lines) if line.startswith("agreement with the source's grader"))
    lines = [line for line in out_lines[start + 1:] if line.startswith("  ")]
    assert "1/13 (7.7%), 12 disagree" in out_lines[start]
    assert len(lines) == 11 and all(len(line) < 200 for line in lines), lines
    assert lines[-1] == f"  ... 2 more; all 12 in full: {run / DISAGREEMENTS}"
    listed = read_jsonl(run / DISAGREEMENTS)
    assert len(listed) == 12 and listed[0]["completion"] == rows[0]["completion"]  # whole, with its completion
    assert listed[0]["extracted"] == long_answer[:1000] and listed[0]["source_extracted"] == "y" * 2500
    assert read_json(run / "metrics.json")["provenance"]["source_agreement"]["disagreements_file"] == DISAGREEMENTS

    # re-scored with no disagreement left: the stale list goes
    (run / "samples.jsonl").write_text(json.dumps(rows[-1]) + "\n")
    assert run_cli("score", str(run), "--bootstrap", "0", "--workers", "1").returncode == 0
    assert not (run / DISAGREEMENTS).exists()


def test_the_no_answer_warning_names_the_same_example_whatever_the_file_order():
    """A concurrent engine appends samples in the order its requests finish; the warning's example is
    the first missing sample in key order, so the same run reads the same warning every time."""
    from dsdr_eval.rundir.samples import as_graded
    from dsdr_eval.scoring.checks import no_answer_warnings

    rows = [{"benchmark": "b", "phase": "sampling", "problem_id": f"p{i // 3}", "sample_idx": i % 3, "gold": "1",
             "completion": f"ends {i}", "status": "no_answer", "correct": False, "answer_class": None}
            for i in range(6)]
    for order in (rows, rows[::-1], rows[3:] + rows[:3]):
        (warning,) = no_answer_warnings(as_graded(order), "boxed")
        assert "e.g. problem p0 sample 0 ends 'ends 0'" in warning, warning
