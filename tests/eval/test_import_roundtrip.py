"""import -> score -> diversity -> report on a Qwen2.5-Math output file: the imported run works with
every later stage unchanged, and `score` shows where our grader and the source's disagree."""

from __future__ import annotations

import json


from helpers import import_sources as src
from helpers.encoders import BagOfWordsEncoder  # the suite's fake encoder (no model load)
from dsdr_eval.cli import main
from dsdr_eval.diversity_metrics.run import compute_run_diversity
from dsdr_eval.rundir.jsonl import read_jsonl


def test_import_score_diversity_report(tmp_path, data_dir, capsys):
    path = src.write_qwen_math(tmp_path / "outputs", data_dir)
    run = tmp_path / "run"
    assert main(["import", "--from", "qwen-math", str(path), "--out", str(run), "--label", "qwen-import"]) == 0
    assert main(["score", str(run), "--workers", "1", "--bootstrap", "20", "--no-progress"]) == 0
    out = capsys.readouterr().out

    graded = read_jsonl(run / "graded.jsonl")
    differ = [row for row in graded if row["correct"] != row["source_correct"]]
    agreement = json.loads((run / "metrics.json").read_text())["provenance"]["source_agreement"]
    assert agreement["n_compared"] == len(graded) == 9
    assert agreement["n_agree"] == 9 - len(differ) and agreement["fraction"] == (9 - len(differ)) / 9
    assert [d["key"] for d in agreement["disagreements"]] == [
        [r["benchmark"], r["phase"], r["problem_id"], r["sample_idx"]] for r in differ]
    assert agreement["per_benchmark"] == {"math500": {"n_compared": 9, "n_agree": 9 - len(differ)}}
    assert f"agreement with the source's grader: {9 - len(differ)}/9" in out
    # the fixture's third completion states the gold without \boxed: graders differ on it, and say so
    assert differ and all(r["sample_idx"] == 2 for r in differ)
    assert f"('math500', 'sampling', '{differ[0]['problem_id']}', 2): ours correct" in out  # one clipped line each

    compute_run_diversity(run, encoder=BagOfWordsEncoder(), progress=False)
    metrics = json.loads((run / "metrics.json").read_text())
    assert "diversity" in metrics["benchmarks"]["math500"]
    assert metrics["provenance"]["source_agreement"] == agreement  # diversity keeps the score section

    report = tmp_path / "report"
    assert main(["report", str(run), "--out", str(report)]) == 0
    readme = (report / "README.md").read_text()
    assert "qwen-import" in readme and "T=0.6" in readme and "qwen-math (imported)" in readme
    assert (report / "table1.csv").is_file() and (report / "passk.csv").is_file()


def test_score_of_a_run_without_source_labels_has_no_agreement(tmp_path, data_dir, capsys):
    path = src.write_verl(tmp_path / "val", data_dir, with_acc=False)
    run = tmp_path / "run"
    assert main(["import", "--from", "verl", str(path), "--out", str(run)]) == 0
    assert main(["score", str(run), "--workers", "1", "--bootstrap", "0", "--no-progress"]) == 0
    assert "agreement" not in capsys.readouterr().out
    assert "source_agreement" not in json.loads((run / "metrics.json").read_text())["provenance"]
