"""`dsdr-eval report`: Table 1 / plots / paired comparisons on fixture runs scored by the real code."""

from __future__ import annotations

import argparse
import csv
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dsdr_eval.errors import DsdrError
from dsdr_eval.cli import report as report_cli
from dsdr_eval.reporting import compare, reference, tables
from dsdr_eval.reporting.runs import protocol_differences
from dsdr_eval.rundir.results import load_run
from helpers.fixtures_runs import build_fixture_runs, make_scored_run

ALGORITHMS_MD = Path(__file__).resolve().parents[3] / "shared" / "docs" / "ALGORITHMS.md"


@pytest.fixture(scope="session")
def fixture_runs(tmp_path_factory, data_dir) -> Path:
    return build_fixture_runs(tmp_path_factory.getbasetemp() / "dsdr_fixture_runs", data_dir)


def run_report(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    report_cli.add_arguments(parser)
    return report_cli.main(parser.parse_args(argv))


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# ------------------------------------------------------------------------------ published table


def test_paper_table_is_as_printed_and_flags_exactly_the_inconsistent_cells():
    table = reference.load_paper_table()
    benches = table["benchmarks"]
    assert benches == ["aime24", "aime25", "math500", "minerva", "olympiadbench"]
    computed_flags = set()
    for block in table["blocks"]:
        for row in block["rows"]:
            cells = row["cells"]
            assert set(cells) == {*benches, "average"}
            for metric in ("pass1", "avg@16"):
                mean = sum(float(cells[b][metric]) for b in benches) / 5
                if abs(mean - float(cells["average"][metric])) > 0.05 + 1e-9:
                    computed_flags.add((block["id"], row["method"], f"average.{metric}"))
            for bench in ("aime24", "aime25"):  # 30 problems: a single-rollout Pass@1 is k/30
                solved = float(cells[bench]["pass1"]) * 30 / 100
                if abs(solved - round(solved)) > 0.02:
                    computed_flags.add((block["id"], row["method"], f"{bench}.pass1"))
    shipped_flags = {(b["id"], r["method"], f["cell"]) for b in table["blocks"] for r in b["rows"] for f in r["flags"]}
    assert shipped_flags == computed_flags
    assert len(shipped_flags) == 5  # ALGORITHMS.md §6 names these five cells


@pytest.mark.skipif(not ALGORITHMS_MD.exists(), reason="ALGORITHMS.md not next to the checkout")
def test_paper_table_matches_the_spec_text_cell_by_cell():
    text = ALGORITHMS_MD.read_text(encoding="utf-8").split("## 6.")[1]
    printed = re.findall(r"^\| ([^|]+?) \| (.+) \|$", text, flags=re.M)
    rows = [(m.strip(), [c.strip() for c in cells.split("|")]) for m, cells in printed if m.strip() != "method"]
    shipped = [(r.method, r.printed) for r in reference.paper_rows()]
    assert len(rows) == len(shipped) == 16
    for (method, cells), (s_method, s_printed) in zip(rows, shipped):
        assert method == s_method
        columns = ["aime24", "aime25", "math500", "minerva", "olympiadbench", "average"]
        assert cells == [f"{s_printed[c]['pass1']} / {s_printed[c]['avg@16']}" for c in columns]


def test_reference_selection():
    assert {r.block_id for r in reference.select_reference("paper", model_hints=["Qwen/Qwen3-1.7B"])} == {"qwen3-1.7b"}
    assert {r.block_id for r in reference.select_reference("paper", model_hints=["Qwen/Qwen2.5-Math-1.5B"])} == {
        "qwen2.5-math-1.5b"}
    assert len(reference.select_reference("paper", model_hints=["smollm2-135m"])) == 16  # no match: all
    assert len(reference.select_reference("paper:all")) == 16
    assert [r.method for r in reference.select_reference("paper:qwen3-4b")][:4] == ["Backbone", "GRPO", "DAPO", "DSDR"]
    with pytest.raises(DsdrError, match="unknown block"):
        reference.select_reference("paper:qwen9")
    with pytest.raises(DsdrError, match="unknown reference"):
        reference.select_reference("arxiv")


# ----------------------------------------------------------------------------------- full report


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_report_two_runs_end_to_end(fixture_runs, tmp_path):
    # Through the real console entry point, from the user's working directory, relative --out.
    grpo, dsdr = fixture_runs / "eval" / "grpo", fixture_runs / "eval" / "dsdr"
    argv = ["report", str(grpo), str(dsdr), "--out", "reports/grpo_vs_dsdr", "--reference", "paper:qwen3-1.7b",
            "--ci", "--bootstrap", "500"]
    done = subprocess.run([sys.executable, "-m", "dsdr_eval.cli", *argv], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "reports" / "grpo_vs_dsdr"
    for name in ("README.md", "table1.md", "table1.tex", "table1.csv", "passk.csv", "diversity.csv", "judge.csv",
                 "comparison.csv", "report.json", "plots/passk.png", "plots/passk.svg", "plots/diversity.png",
                 "plots/diversity.svg", "plots/judge_vs_pass32.png", "plots/judge_vs_pass32.svg"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert (out / "plots/passk.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (out / "plots/passk.svg").read_bytes()[:2000]

    # Every run value in table1.csv is metrics.json's (percent), with its CI.
    rows = read_csv(out / "table1.csv")
    for run_dir in (grpo, dsdr):
        metrics = json.loads((run_dir / "metrics.json").read_text())
        label = json.loads((run_dir / "config.json").read_text())["label"]
        mine = [r for r in rows if r["label"] == label]
        assert len(mine) == 2 * (len(metrics["benchmarks"]) + 1)
        for r in mine:
            source = metrics["average"] if r["benchmark"] == "average" else metrics["benchmarks"][r["benchmark"]]
            assert float(r["value_pct"]) == pytest.approx(100 * source[r["metric"]], abs=1e-8)
            if r["benchmark"] != "average":
                lo, hi = source["ci95"][r["metric"]]
                assert float(r["ci95_lo_pct"]) == pytest.approx(100 * lo, abs=1e-8)
                assert float(r["ci95_hi_pct"]) == pytest.approx(100 * hi, abs=1e-8)
    published = [r for r in rows if r["source"] == "published"]
    assert {r["label"] for r in published} == {f"Qwen3-1.7B {m} (published)" for m in
                                               ("Backbone", "GRPO", "DAPO", "DSDR", "w/o GD", "w/o GC")}

    # The Markdown table shows the same numbers, one decimal, "Pass@1 / Avg@16".
    md = (out / "table1.md").read_text()
    metrics = json.loads((dsdr / "metrics.json").read_text())
    cell = f"{100 * metrics['benchmarks']['aime24']['pass1']:.1f}"
    assert re.search(rf"^\| dsdr \| {re.escape(cell)} \[", md, flags=re.M)
    assert "Qwen3-1.7B DSDR (published) | 36.7 / 32.1" in md
    tex = (out / "table1.tex").read_text()
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex and "w/o GD" in tex

    readme = (out / "README.md").read_text()
    assert json.loads((out / "report.json").read_text())["command"] == ["dsdr-eval", *argv]
    assert "dsdr-eval " + shlex.join(argv) in readme and f"(from `{tmp_path}`)" in readme
    for fact in ("n=16", "T=0.7", "top-p=0.9", "n=1, T=0.1", "| 512 |", "qwen-boxed", "hf 5.19.0", "math-verify"):
        assert fact in readme, fact
    assert "(published)" in readme and "not computed here" in readme
    assert "dsdr was not evaluated with the paper's protocol (max tokens 512 (paper 8192))" in readme
    assert "![Pass@k per benchmark](plots/passk.png)" in readme
    assert "Paired comparison" in readme and "Mixed protocols" not in readme


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_report_comparison_is_paired_and_matches_metrics(fixture_runs):
    grpo = load_run(fixture_runs / "eval" / "grpo")
    dsdr = load_run(fixture_runs / "eval" / "dsdr")
    results, warnings = compare.compare_runs(grpo, dsdr, metrics=["pass1", "avg@16", "pass@8"], bootstrap=500)
    raw = {run.label: json.loads((run.path / "metrics.json").read_text())["benchmarks"] for run in (grpo, dsdr)}
    assert warnings == []
    by_key = {(c.benchmark, c.metric): c for c in results}
    for bench in grpo.benchmarks:
        for metric, key in (("pass1", "pass1"), ("avg@16", "avg@16")):
            c = by_key[(bench, metric)]
            assert c.baseline_value == pytest.approx(raw["grpo"][bench][key], abs=1e-12)
            assert c.run_value == pytest.approx(raw["dsdr"][bench][key], abs=1e-12)
            assert c.diff == pytest.approx(c.run_value - c.baseline_value, abs=1e-12)
            assert c.ci95_lo <= c.diff <= c.ci95_hi and 0 < c.p_value <= 1
        c = by_key[(bench, "pass@8")]
        assert c.run_value == pytest.approx(raw["dsdr"][bench]["pass@k"]["8"], abs=1e-12)
    average = by_key[("average", "avg@16")]
    assert average.diff == pytest.approx(np.mean([by_key[(b, "avg@16")].diff for b in grpo.benchmarks]))
    # A run against itself: no difference, p = 1.
    same, _ = compare.compare_runs(grpo, grpo, metrics=["avg@16"], bootstrap=200)
    assert all(c.diff == 0 and c.p_value == 1.0 and c.ci95_lo == c.ci95_hi == 0 for c in same)


def test_paired_bootstrap_detects_a_real_difference_and_not_a_null_one():
    rng = np.random.default_rng(1)
    a = rng.random(200)
    delta, lo, hi, p = compare.paired_bootstrap([np.full(200, 0.1) + 0.05 * (a - 0.5)], bootstrap=2000, rng=rng)
    assert lo > 0 and p < 0.01
    null = rng.normal(0, 1, 200)
    null -= null.mean()  # mean difference exactly 0
    delta, lo, hi, p = compare.paired_bootstrap([null], bootstrap=2000, rng=rng)
    assert lo < 0 < hi and p > 0.9


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_compare_refuses_different_problem_sets_unless_allowed(fixture_runs, tmp_path, data_dir):
    small = make_scored_run(tmp_path / "small", data_dir, label="small", accuracy=0.5,
                            benchmarks={"aime24": 3, "math500": 4})
    grpo = load_run(fixture_runs / "eval" / "grpo")
    small_run = load_run(small)
    with pytest.raises(DsdrError, match="problem sets differ"):
        compare.compare_runs(grpo, small_run, metrics=["avg@16"], bootstrap=200)
    results, warnings = compare.compare_runs(grpo, small_run, metrics=["avg@16"], bootstrap=200, allow_mismatch=True)
    assert any("aime24: problem sets differ" in w and "shared: 3" in w for w in warnings)
    assert next(c for c in results if c.benchmark == "aime24").n_problems == 3


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_report_refuses_mixed_protocols_unless_allowed(fixture_runs, tmp_path):
    grpo, hot = fixture_runs / "eval" / "grpo", fixture_runs / "eval" / "hot"
    assert protocol_differences([load_run(grpo), load_run(hot)]) == [
        "sampling.temperature: grpo=0.7 vs hot=1.0"]
    out = tmp_path / "mixed"
    with pytest.raises(DsdrError, match="sampling.temperature"):
        run_report([str(grpo), str(hot), "--out", str(out), "--bootstrap", "200"])
    assert not out.exists()  # nothing half-written
    assert run_report([str(grpo), str(hot), "--out", str(out), "--allow-mixed", "--bootstrap", "200"]) == 0
    readme = (out / "README.md").read_text()
    assert "Mixed protocols (`--allow-mixed`)" in readme and "sampling.temperature: grpo=0.7 vs hot=1.0" in readme
    assert "--allow-mixed" in json.loads((out / "report.json").read_text())["command"]


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_report_skips_missing_figures_and_says_so(fixture_runs, tmp_path):
    out = tmp_path / "single"
    assert run_report([str(fixture_runs / "eval" / "hot"), "--out", str(out), "--label", "hot run",
                       "--train", str(fixture_runs / "train" / "dsdr")]) == 0
    readme = (out / "README.md").read_text()
    assert not (out / "plots" / "diversity.png").exists()
    assert "Figure skipped: no diversity in metrics.json" in readme
    assert "Figure skipped: no judge scores" in readme
    assert "Skipped: one evaluation run" in readme
    assert "| hot run |" in readme  # --label wins over config.json's label
    assert (out / "plots" / "training.png").is_file()  # the half-written last line is skipped, not fatal
    # Regenerating in place replaces the report; a foreign non-empty directory is refused.
    assert run_report([str(fixture_runs / "eval" / "hot"), "--out", str(out), "--no-compare"]) == 0
    assert not (out / "plots" / "training.png").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(DsdrError, match="not a previous report"):
        run_report([str(fixture_runs / "eval" / "hot"), "--out", str(foreign)])
    assert (foreign / "notes.txt").read_text() == "mine"


def _few_rollouts_run(tmp_path: Path, data_dir: Path) -> Path:
    """A scored math500 run with n = 4 < 16 sampling rollouts per problem (the table falls back to Avg@n)."""
    quick = {"name": "quick", "phases": [{"phase": "pass1", "n": 1, "temperature": 0.1, "top_p": 0.9},
                                         {"phase": "sampling", "n": 4, "temperature": 0.7, "top_p": 0.9}],
             "max_tokens": 256, "seed": 0}
    return make_scored_run(tmp_path / "quick", data_dir, label="quick", accuracy=0.5, protocol=quick,
                           benchmarks={"math500": 4})


def test_avg_metric_falls_back_to_avg_n_with_few_rollouts(tmp_path, data_dir):
    run_dir = _few_rollouts_run(tmp_path, data_dir)
    run = load_run(run_dir)
    metric, notes = tables.choose_avg_metric([run], "auto")
    assert metric == "avg@n" and "not the paper's Avg@16" in notes[0]
    table = tables.build_table1([run], [], avg_metric=metric)
    assert table.rows[0].cells[("math500", "avg@n")].value == pytest.approx(
        100 * json.loads((run_dir / "metrics.json").read_text())["benchmarks"]["math500"]["avg@n"])
    assert "Avg@n" in tables.to_markdown(table)


def test_published_rows_fill_the_avg_n_column_with_the_papers_avg16(tmp_path, data_dir):
    # n < 16: the table's second column is Avg@n, and the note says the published rows show the paper's
    # Avg@16 there; the cells must then hold those printed values, not "-" (the paper has no avg@n)
    run_dir = _few_rollouts_run(tmp_path, data_dir)
    raw = json.loads((Path(tables.__file__).parents[1] / "data" / "paper_table1.json").read_text())
    block = next(b for b in raw["blocks"] if b["id"] == "qwen3-4b")
    table = tables.build_table1([load_run(run_dir)], reference.select_reference("paper:qwen3-4b"), avg_metric="avg@n")
    published = [row for row in table.rows if row.source == "published"]
    assert len(published) == len(block["rows"]) > 0
    for row, source in zip(published, block["rows"]):
        for bench in ("math500", "average"):
            cell = row.cells[(bench, "avg@n")]
            assert cell.printed == source["cells"][bench]["avg@16"]
            assert row.cells[(bench, "pass1")].printed == source["cells"][bench]["pass1"]
    assert "Published rows show the paper's Avg@16 in the Avg@n column." in table.notes


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_bad_inputs_give_clear_errors(fixture_runs, tmp_path):
    with pytest.raises(DsdrError, match="invalid JSON"):
        load_run(fixture_runs / "eval" / "broken")
    with pytest.raises(DsdrError, match="missing metrics.json"):
        load_run(fixture_runs / "eval" / "unscored")
    train_copy = tmp_path / "train_copy"
    shutil.copytree(fixture_runs / "train" / "grpo", train_copy)
    (train_copy / "metrics.json").write_text('{"benchmarks": {}}')
    with pytest.raises(DsdrError, match="training run"):
        load_run(train_copy)
    with pytest.raises(DsdrError, match="one --label per RUN_DIR"):
        run_report([str(fixture_runs / "eval" / "grpo"), "--out", str(tmp_path / "x"), "--label", "a", "--label", "b"])
    assert tables.latex_escape("w/o_GD & 50% #1") == r"w/o\_GD \& 50\% \#1"


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_training_only_report(fixture_runs, tmp_path):
    out = tmp_path / "train_only"
    assert run_report(["--train", str(fixture_runs / "train" / "grpo"), "--train", str(fixture_runs / "train" / "dsdr"),
                       "--out", str(out), "--smoothing", "0.5"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "plots", "report.json"]
    readme = (out / "README.md").read_text()
    assert "## Training dynamics" in readme and "| grpo-fixture |" in readme and "| dsdr-fixture |" in readme
    assert "EMA smoothing alpha=0.5" in readme and "Table 1" not in readme
    with pytest.raises(DsdrError, match="at least one"):
        run_report(["--out", str(tmp_path / "nothing")])


def test_a_run_with_forced_mixed_settings_is_flagged_in_provenance_and_report(tmp_path, data_dir):
    """`run --force-config` records `mixed_settings`; score's provenance and the report must say so."""
    run = tmp_path / "mixed-run"
    from helpers.fixtures_runs import write_eval_samples
    from dsdr_eval.reporting.runs import protocol_notes
    from dsdr_eval.scoring.score import score_run_dir

    write_eval_samples(run, data_dir, label="mixed", accuracy=0.5, benchmarks={"aime24": 2})
    config = json.loads((run / "config.json").read_text())
    config["mixed_settings"] = ["model"]
    (run / "config.json").write_text(json.dumps(config))
    score_run_dir(run, progress=False, workers=1)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["provenance"]["run_config"]["mixed_settings"] == ["model"]
    notes = protocol_notes([load_run(run)])
    assert any("mixed settings" in note and "model" in note for note in notes)


def _darling_run(run_dir: Path, accuracy: float, seed: int) -> Path:
    """A darling-paper run (256 rollouts per problem) from a synthetic graded set: graded.jsonl,
    config.json and the real compute_metrics' metrics.json (no generation, no grading)."""
    from dsdr_eval.rundir.jsonl import write_json, write_jsonl
    from dsdr_eval.scoring.metrics import compute_metrics
    from dsdr_eval.protocols import get_protocol

    correct = np.random.default_rng(seed).random((3, 256)) < np.array([0.01, accuracy, 0.9])[:, None]
    rows = [{"benchmark": "aime25", "problem_id": f"p{p}", "sample_idx": s, "phase": "sampling", "gold": "1",
             "completion": "c", "correct": bool(ok), "status": "correct" if ok else "incorrect",
             "answer_class": 0 if ok else 1} for p, row in enumerate(correct) for s, ok in enumerate(row)]
    run_dir.mkdir(parents=True)
    write_jsonl(run_dir / "graded.jsonl", rows)
    write_json(run_dir / "config.json", {
        "kind": "eval", "label": run_dir.name, "protocol": get_protocol("darling-paper").to_config(),
        "backend": {"name": "vllm", "version": "0.11.0"}, "template": {"name": "qwen-boxed", "text": "{problem}"},
        "benchmarks": [{"name": "aime25", "n_problems": 3}]})
    write_json(run_dir / "metrics.json", compute_metrics(rows, bootstrap=100))
    return run_dir


def test_report_carries_pass_at_128_of_a_darling_run(tmp_path):
    """n = 256: Pass@k up to 256 (DARLING's pass@128 among them) in passk.csv, the plot, the paired
    comparison and the dashboard's figure, with the protocol stated."""
    a = _darling_run(tmp_path / "grpo", 0.2, 1)
    b = _darling_run(tmp_path / "darling", 0.4, 2)
    out = tmp_path / "report"
    assert run_report([str(a), str(b), "--out", str(out), "--bootstrap", "200"]) == 0
    passk = read_csv(out / "passk.csv")
    for label in ("grpo", "darling"):
        ks = sorted(int(r["k"]) for r in passk if r["label"] == label and r["benchmark"] == "aime25")
        assert ks == [2 ** e for e in range(9)]
    metrics = json.loads((b / "metrics.json").read_text())["benchmarks"]["aime25"]
    row = next(r for r in passk if r["label"] == "darling" and r["k"] == "128")
    assert float(row["value"]) == pytest.approx(metrics["pass@k"]["128"])
    assert "pass@128" in {r["metric"] for r in read_csv(out / "comparison.csv")}
    assert (out / "plots/passk.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    readme = (out / "README.md").read_text()
    assert "sampling: n=256, T=0.6, top-p=0.95" in readme and "| 8192 |" in readme

    from dashboards import charts
    from dsdr_eval.rundir.records import pass_at_k_records

    figure = charts.pass_at_k_figure(pass_at_k_records([load_run(a), load_run(b)]), "aime25", "AIME25")
    assert list(figure.layout.xaxis.tickvals) == [2 ** e for e in range(9)]


def test_a_report_refuses_runs_differing_only_in_top_k(tmp_path, data_dir):
    """Two runs whose protocols differ only in the sampling phase's top_k are not comparable: the report
    refuses them and, with --allow-mixed, says so; an old config.json (no top_k) and one recording
    top_k 0 are the same protocol. Mutant 'PHASE_COMPARED without top_k': the refusal disappears."""
    def protocol(**sampling):
        return {"name": "quick", "max_tokens": 256, "seed": 0,
                "phases": [{"phase": "pass1", "n": 1, "temperature": 0.1, "top_p": 0.9},
                           {"phase": "sampling", "n": 4, "temperature": 0.7, "top_p": 0.9, **sampling}]}

    runs = {label: make_scored_run(tmp_path / label, data_dir, label=label, accuracy=0.5, protocol=protocol(**extra),
                                   benchmarks={"math500": 4})
            for label, extra in (("old", {}), ("off", {"top_k": 0, "min_p": 0.0}), ("topk", {"top_k": 20}))}
    old, off, topk = (load_run(runs[label]) for label in ("old", "off", "topk"))
    assert protocol_differences([old, off]) == [] and old.protocol.comparable_key() == off.protocol.comparable_key()
    assert protocol_differences([old, topk]) == ["sampling.top_k: old=0 vs topk=20"]
    out = tmp_path / "report"
    with pytest.raises(DsdrError, match="sampling.top_k: old=0 vs topk=20"):
        run_report([str(runs["old"]), str(runs["topk"]), "--out", str(out), "--no-compare"])
    assert not out.exists()
    assert run_report([str(runs["old"]), str(runs["topk"]), "--out", str(out), "--no-compare", "--allow-mixed"]) == 0
    readme = (out / "README.md").read_text()
    assert "sampling: n=4, T=0.7, top-p=0.9, top-k=20" in readme and "sampling.top\\_k: old=0 vs topk=20" in readme
    recorded = json.loads((out / "report.json").read_text())["runs"]
    assert [r["protocol"]["phases"][1].get("top_k") for r in recorded] == [None, 20]
