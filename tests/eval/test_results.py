"""metrics.json's one writer (rundir.update_metrics) and its one typed reader (dsdr_eval.rundir.results.load_run)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dashboards import data
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.errors import DsdrError
from dsdr_eval.options.commands import ReportOptions
from dsdr_eval.reporting.build import make_report
from dsdr_eval.rundir.results import load_run

SCORE = {"math500": {"n_problems": 2, "n_samples_per_problem": 4, "pass1": 0.5, "avg@n": 0.625,
                     "pass@k": {"1": 0.625, "2": 0.75, "4": 1.0}, "maj@k": {"4": 0.5},
                     "ci95": {"pass1": [0.0, 1.0], "avg@n": [0.25, 1.0], "pass@k": {"2": [0.5, 1.0]}},
                     "status_counts": {"correct": 5, "incorrect": 3}},
         "aime24": {"n_problems": 1, "n_samples_per_problem": 4, "pass1": 0.0, "avg@n": 0.25,
                    "pass@k": {"1": 0.25, "2": 0.5, "4": 1.0}, "ci95": {}}}
SUMMARY = {"average": {"pass1": 0.25, "avg@n": 0.4375, "pass@k": {"1": 0.4375}, "ci95": {},
                       "benchmarks": ["aime24", "math500"]},
           "provenance": {"bootstrap": 50, "seed": 0, "versions": {"dsdr": "0.1.0"}}}
DIVERSITY = {"settings": {"encoder": {"name": "x"}}, "n_problems": 2,
             "all": {"d_emb": 0.31, "d_eq": 0.42, "darling_div": 0.5, "vendi_embedding": {"1": 2.5}},
             "correct": {"d_emb": 0.2, "d_eq": None, "darling_div": 0.4, "vendi_embedding": {"1": 1.5}}}
JUDGE = {"overall": 6.5, "logic": 6.0, "formula": 7.0, "semantic": 6.5, "n_problems": 2, "n_ok": 2, "n_failed": 0,
         "judge_model": "judge-x"}


def scored_run(run_dir: Path, *, diversity: bool = True, judge: bool = True) -> Path:
    rundir.update_metrics(run_dir, rundir.SCORE_SECTION, SCORE, summary=SUMMARY)
    if diversity:
        rundir.update_metrics(run_dir, rundir.DIVERSITY_SECTION, {"math500": DIVERSITY})
    if judge:
        rundir.update_metrics(run_dir, rundir.JUDGE_SECTION, {"math500": JUDGE, "aime24": JUDGE})
    return run_dir


def saved(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


# ------------------------------------------------------------------------- the writer

def test_each_stage_owns_its_section_and_cannot_clobber_another(tmp_path):
    run = scored_run(tmp_path / "run")
    metrics = saved(run)
    assert metrics["benchmarks"]["math500"]["diversity"] == DIVERSITY
    assert metrics["benchmarks"]["math500"]["judge"] == metrics["benchmarks"]["aime24"]["judge"] == JUDGE
    assert metrics["average"] == SUMMARY["average"] and metrics["provenance"] == SUMMARY["provenance"]
    # Re-scoring replaces the scores (and the top level) and keeps diversity + judge of each benchmark it scores.
    rescored = {"math500": {**SCORE["math500"], "pass1": 1.0, "diversity": "stale", "judge": "stale"}}
    rundir.update_metrics(run, rundir.SCORE_SECTION, rescored, summary={"provenance": {"bootstrap": 10}})
    metrics = saved(run)
    assert set(metrics["benchmarks"]) == {"math500"}  # aime24 is no longer scored
    assert metrics["benchmarks"]["math500"]["pass1"] == 1.0
    assert metrics["benchmarks"]["math500"]["diversity"] == DIVERSITY
    assert metrics["benchmarks"]["math500"]["judge"] == JUDGE
    assert "average" not in metrics and metrics["provenance"] == {"bootstrap": 10}
    # Diversity and judge touch nothing but their own key.
    before = saved(run)
    rundir.update_metrics(run, rundir.DIVERSITY_SECTION, {"math500": {"all": {"d_emb": 0.9}}})
    after = saved(run)
    assert after["benchmarks"]["math500"]["diversity"] == {"all": {"d_emb": 0.9}}
    after["benchmarks"]["math500"]["diversity"] = before["benchmarks"]["math500"]["diversity"]
    assert after == before
    rundir.update_metrics(run, rundir.JUDGE_SECTION, {"math500": {"overall": 1.0}})
    assert saved(run)["benchmarks"]["math500"]["diversity"] == {"all": {"d_emb": 0.9}}
    with pytest.raises(ValueError, match="unknown metrics.json section"):
        rundir.update_metrics(run, "scores", {})
    with pytest.raises(ValueError, match="top-level"):
        rundir.update_metrics(run, rundir.JUDGE_SECTION, {}, summary={"average": {}})


def test_a_malformed_metrics_file_stops_diversity_and_judge_but_not_the_scorer(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    text = json.dumps({"benchmarks": {"math500": [1, 2], "aime24": {"diversity": DIVERSITY}}})
    (run / "metrics.json").write_text(text)
    for section in (rundir.DIVERSITY_SECTION, rundir.JUDGE_SECTION):
        with pytest.raises(DsdrError, match=r"metrics.json: field benchmarks.math500 must be an object"):
            rundir.update_metrics(run, section, {"math500": {}})
    assert (run / "metrics.json").read_text() == text  # untouched
    rundir.update_metrics(run, rundir.SCORE_SECTION, SCORE, summary=SUMMARY)
    assert saved(run)["benchmarks"]["math500"]["pass1"] == 0.5
    assert saved(run)["benchmarks"]["aime24"]["diversity"] == DIVERSITY  # the readable rest is kept
    (run / "metrics.json").write_text("{not json")
    assert rundir.update_metrics(run, rundir.SCORE_SECTION, SCORE)["benchmarks"]["math500"]["pass1"] == 0.5


def _slow_rundir_reads(monkeypatch):
    """Widen every read-modify-write window of rundir (a read sleeps 0.3 s); returns the real reader."""
    real_read = rundir.read_json

    def slow_read(path):
        value = real_read(path)
        time.sleep(0.3)
        return value

    monkeypatch.setattr(rundir, "read_json", slow_read)
    return real_read


def test_two_stages_updating_at_once_both_land(tmp_path, monkeypatch):
    """diversity and judge run at the same time on one run directory: neither section is lost."""
    run = scored_run(tmp_path / "run", diversity=False, judge=False)
    _slow_rundir_reads(monkeypatch)
    threads = [threading.Thread(target=rundir.update_metrics, args=(run, section, {"math500": block}))
               for section, block in ((rundir.DIVERSITY_SECTION, DIVERSITY), (rundir.JUDGE_SECTION, JUDGE))]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    entry = saved(run)["benchmarks"]["math500"]
    assert entry["diversity"] == DIVERSITY and entry["judge"] == JUDGE
    assert sorted(p.name for p in run.iterdir()) == ["metrics.json"]  # the lock leaves no file behind


def test_stage_settings_in_config_json_have_one_writer_and_both_land(tmp_path, monkeypatch):
    """diversity and judge each record their settings under their own config.json key with their
    metrics (rundir.update_metrics(settings=...)), under the run directory's lock: running at once,
    both land and run's own keys stay; a run dir without config.json gets none."""
    run = scored_run(tmp_path / "run", diversity=False, judge=False)
    rundir.update_metrics(run, rundir.DIVERSITY_SECTION, {"math500": DIVERSITY}, settings={"x": 1})
    assert not (run / rundir.CONFIG).exists()
    rundir.save_config(run, {"kind": "eval", "label": "a"})
    real_read = _slow_rundir_reads(monkeypatch)
    blocks = {rundir.DIVERSITY_SECTION: DIVERSITY, rundir.JUDGE_SECTION: JUDGE}
    threads = [threading.Thread(target=rundir.update_metrics, args=(run, stage, {"math500": block}),
                                kwargs={"settings": {"stage": stage}})
               for stage, block in blocks.items()]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    config = real_read(run / rundir.CONFIG)
    assert config["diversity"] == {"stage": "diversity"} and config["judge"] == {"stage": "judge"}
    assert config["kind"] == "eval" and config["label"] == "a"
    entry = real_read(run / rundir.METRICS)["benchmarks"]["math500"]
    assert entry["diversity"] == DIVERSITY and entry["judge"] == JUDGE


# ------------------------------------------------------------------------- the reader

def test_load_run_reads_every_documented_field(tmp_path):
    run = load_run(scored_run(tmp_path / "run"))
    assert list(run.benchmarks) == ["aime24", "math500"]  # the paper's order
    math = run.benchmarks["math500"]
    assert (math.n_problems, math.n_samples_per_problem) == (2, 4)
    assert math.scores.value("pass1") == 0.5 and math.scores.value("avg@n") == 0.625
    assert math.scores.at_k("pass") == {1: 0.625, 2: 0.75, 4: 1.0} and math.scores.value("maj@4") == 0.5
    assert math.scores.interval("pass@2") == (0.5, 1.0) and math.scores.interval("avg@16") is None
    assert math.status_counts == {"correct": 5, "incorrect": 3}
    assert math.diversity.value("semantic") == 0.31 and math.diversity.value("vendi", "correct") == 1.5
    assert math.diversity.value("formula", "correct") is None and math.diversity.n_problems == 2
    assert math.judge.axes["overall"] == 6.5 and math.judge.judge_model == "judge-x"
    assert run.benchmarks["aime24"].diversity is None
    assert run.average.benchmarks == ("aime24", "math500") and run.average.scores.value("avg@n") == 0.4375
    assert run.provenance.get("bootstrap") == 50
    assert run.settings.versions == {"dsdr": "0.1.0"}  # no config.json: the scorer's record
    assert run.settings.source.startswith("unknown")


@pytest.mark.parametrize("entry, message", [
    ({"pass1": "0.5"}, r"metrics.json: benchmarks.math500.pass1: must be a number or null"),
    ({"pass@k": {"one": 0.5}}, r"benchmarks.math500.pass@k: key 'one' must be a positive integer k"),
    ({"ci95": {"pass1": [0.1]}}, r"benchmarks.math500.ci95.pass1: must be \[lo, hi\]"),
    ({"n_problems": -1}, r"benchmarks.math500.n_problems: must be a non-negative integer"),
    # A diversity block in any layout but the documented one is refused, never searched for a number.
    ({"diversity": {"semantic": {"all": 0.3}}}, r"benchmarks.math500.diversity: unknown layout"),
    ({"diversity": {"all": {"d_emb": "high"}}}, r"benchmarks.math500.diversity.all.d_emb: must be a number"),
    ({"judge": {"scores": {"overall": 7}}}, r"benchmarks.math500.judge: unknown layout"),
])
def test_a_field_of_the_wrong_type_or_layout_names_file_and_field(tmp_path, entry, message):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"benchmarks": {"math500": {"n_problems": 2, **entry}}}))
    with pytest.raises(DsdrError, match=message):
        load_run(run)


def test_unknown_shape_is_one_line_exit_2_in_the_report_and_the_same_message_in_the_dashboard(tmp_path):
    runs = tmp_path / "runs"
    run = scored_run(runs / "old")
    metrics = saved(run)
    metrics["benchmarks"]["math500"]["diversity"] = {"semantic_diversity": {"mean": 0.4}}  # no documented layout
    (run / "metrics.json").write_text(json.dumps(metrics))
    done = subprocess.run([sys.executable, "-m", "dsdr_eval.cli", "report", str(run), "--out", str(tmp_path / "rep")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "metrics.json: benchmarks.math500.diversity: unknown layout" in done.stderr
    entry = next(e for e in data.discover_runs(runs) if e.name == "old")
    loaded = data.load_results(entry)
    assert not loaded.ok and "metrics.json: benchmarks.math500.diversity: unknown layout" in loaded.error


def test_the_report_and_the_dashboard_show_the_numbers_load_run_reads(tmp_path):
    runs = tmp_path / "runs"
    run_dir = scored_run(runs / "r")
    report = make_report(ReportOptions(runs=(str(run_dir),), out=str(tmp_path / "rep"), bootstrap=100))
    assert "diversity.csv" in report["files"] and "judge.csv" in report["files"]
    entry = next(e for e in data.discover_runs(runs) if e.name == "r")
    dashboard = data.load_results(entry).value
    assert dashboard == load_run(run_dir, label=entry.label)
    diversity_csv = (tmp_path / "rep" / "diversity.csv").read_text().splitlines()
    assert "r,math500,semantic,all,0.31" in diversity_csv and "r,math500,vendi,correct,1.5" in diversity_csv
    assert not any(",formula,correct," in line for line in diversity_csv)  # null: undefined, not shown
    judge_csv = (tmp_path / "rep" / "judge.csv").read_text().splitlines()
    assert judge_csv[0] == "label,benchmark,overall,logic,formula,semantic"
    assert "r,math500,6.5,6.0,7.0,6.5" in judge_csv


def test_iter_graded_and_iter_samples_yield_typed_records_or_name_file_line_field(tmp_path):
    from dsdr_eval.rundir.results import iter_graded, iter_samples
    from dsdr_eval.rundir.samples import GradedSample, Sample

    row = {"benchmark": "math500", "problem_id": "p", "sample_idx": 0, "gold": "1", "completion": "c"}
    (tmp_path / "samples.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "graded.jsonl").write_text(json.dumps({**row, "status": "correct", "correct": True}) + "\n"
                                           + json.dumps({**row, "sample_idx": 1, "status": "ok", "correct": 1}) + "\n")
    [sample] = iter_samples(tmp_path / "samples.jsonl")
    assert isinstance(sample, Sample) and sample.key == ("math500", "sampling", "p", 0)
    graded = iter_graded(tmp_path / "graded.jsonl")
    first = next(graded)
    assert isinstance(first, GradedSample) and first.correct is True and first.key.phase == "sampling"
    with pytest.raises(DsdrError, match=r"graded\.jsonl:2:correct: must be true or false"):
        next(graded)


@pytest.mark.parametrize("phase_field, message", [
    ({"top_k": "20"}, r"config.json: protocol.phases\[0\].top_k: must be an integer or null"),
    ({"min_p": True}, r"config.json: protocol.phases\[0\].min_p: must be a number or null"),
])
def test_a_config_top_k_or_min_p_of_the_wrong_type_names_file_and_field(tmp_path, phase_field, message):
    """The protocol a report reads back (Protocol.from_record) gets checked types. Mutant 'check_config
    leaves top_k / min_p unchecked': the run loads with a string top_k and the test fails."""
    run = scored_run(tmp_path / "run")
    phase = {"phase": "sampling", "n": 4, "temperature": 0.7, "top_p": 0.9, **phase_field}
    (run / "config.json").write_text(json.dumps({"kind": "eval", "protocol": {"name": "p", "phases": [phase],
                                                                              "max_tokens": 64, "seed": 0}}))
    with pytest.raises(DsdrError, match=message):
        load_run(run)
