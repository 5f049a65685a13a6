"""compute_run_diversity end to end on a small run directory, and the `diversity` CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dsdr_eval.diversity_metrics import darling_div, darling_partition, dsdr_diversity
from dsdr_eval.diversity_metrics.partition import EmbeddingThresholdEquivalence
from dsdr_eval.diversity_metrics.run import compute_run_diversity
from dsdr_eval.diversity_metrics.partition_methods import make_equivalence
from dsdr_eval.diversity_metrics.semantic import embed_texts
from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.jsonl import read_json, read_jsonl, write_json, write_jsonl
from helpers.encoders import BagOfWordsEncoder

REPO = Path(__file__).resolve().parents[2]


# problem -> list of (completion, correct, answer_class)
PROBLEMS = {
    ("math500", "p-all-correct"): [
        ("We add: $2+2=4$. So \\boxed{4}", True, 0),
        ("Counting gives \\[ 1+1+1+1 = 4 \\] hence \\boxed{4}", True, 0),
        ("We add: $2+2=4$. So \\boxed{4}", True, 0),           # identical to the first
        ("Doubling two: $2 \\cdot 2 = 4$, answer \\boxed{4}", True, 0),
    ],
    ("math500", "p-none-correct"): [
        ("I think it is \\boxed{5}", False, 1),
        ("", False, None),                                     # empty completion
        ("$x = 7$ so \\boxed{7}", False, 2),
        ("$x = 7$ thus \\boxed{7}", False, 2),
    ],
    ("aime24", "q-one-correct"): [
        ("Let $n=3$; then \\boxed{9}", True, 0),
        ("Let $n=4$; then \\boxed{16}", False, 1),
        ("Guess \\boxed{1}", False, 2),
    ],
    ("aime24", "q-single-sample"): [
        ("Only one rollout $z$ \\boxed{0}", True, 0),
    ],
}


def _samples() -> list[dict]:
    rows = []
    for (benchmark, problem_id), rollouts in PROBLEMS.items():
        # a pass1 rollout that must be ignored (it would change every number if it were used)
        rows.append({"benchmark": benchmark, "problem_id": problem_id, "sample_idx": 0, "phase": "pass1",
                     "problem": "Q", "gold": "4", "completion": "PASS1 $totally different$ \\boxed{4}",
                     "correct": True, "status": "correct", "answer_class": 0})
        for idx, (completion, correct, answer_class) in reversed(list(enumerate(rollouts))):  # unsorted
            rows.append({"benchmark": benchmark, "problem_id": problem_id, "sample_idx": idx,
                         "phase": "sampling", "problem": "Q", "gold": "4", "completion": completion,
                         "correct": correct, "status": "correct" if correct else "incorrect",
                         "answer_class": answer_class})
    return rows


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    write_jsonl(tmp_path / "graded.jsonl", _samples())
    write_json(tmp_path / "metrics.json", {"benchmarks": {"math500": {"avg@n": 0.5, "judge": {"x": 1}}},
                                           "average": {"avg@n": 0.5}, "provenance": {"grader": "t"}})
    write_json(tmp_path / "config.json", {"kind": "eval", "label": "t"})
    return tmp_path


def test_compute_run_diversity_end_to_end(run_dir: Path) -> None:
    encoder = BagOfWordsEncoder()
    result = compute_run_diversity(run_dir, encoder=encoder, progress=False,
                                   equivalence=make_equivalence("embedding", threshold=0.95))
    assert set(result) == {"math500", "aime24"}

    per_problem = {(r["benchmark"], r["problem_id"]): r for r in read_jsonl(run_dir / "diversity_per_problem.jsonl")}
    per_sample = read_jsonl(run_dir / "diversity_per_sample.jsonl")
    assert len(per_sample) == sum(len(v) for v in PROBLEMS.values())  # pass1 rollouts skipped
    assert all("PASS1" not in str(r) for r in per_sample)

    # every per-problem number equals the group-level functions on the same texts
    for key, rollouts in PROBLEMS.items():
        texts = [c for c, _, _ in rollouts]
        record = per_problem[key]
        samples = sorted((r for r in per_sample if (r["benchmark"], r["problem_id"]) == key),
                         key=lambda r: r["sample_idx"])
        assert [r["sample_idx"] for r in samples] == list(range(len(texts)))
        if len(texts) >= 2:
            expected = dsdr_diversity(texts, encoder=encoder)
            assert record["all"]["d"] == pytest.approx(float(expected.d.mean()))
            assert [r["d"] for r in samples] == pytest.approx(expected.d.tolist())
            ids = darling_partition(texts, EmbeddingThresholdEquivalence(0.95),
                                    embeddings=embed_texts(texts, encoder))
            assert [r["class_id"] for r in samples] == ids.tolist()
            assert [r["div"] for r in samples] == pytest.approx(darling_div(ids).tolist())
            assert record["all"]["n_classes"] == int(ids.max() + 1)
        else:
            assert record["all"]["d"] is None and samples[0]["d"] is None  # undefined for G = 1

    all_correct = per_problem[("math500", "p-all-correct")]
    assert all_correct["correct"]["d"] == pytest.approx(all_correct["all"]["d"])  # same subgroup
    assert all_correct["all"]["n_classes"] == 3          # the identical pair shares a class
    # c = 4 with classes {0,2},{1},{3}: Coverage@2 = 3 - C(2,2)/C(4,2) - 2*C(3,2)/C(4,2) = 3 - 7/6
    assert all_correct["correct"]["coverage"]["2"] == pytest.approx(3 - 1 / 6 - 2 * 3 / 6)
    assert all_correct["correct"]["coverage"]["4"] == pytest.approx(3.0)

    none_correct = per_problem[("math500", "p-none-correct")]
    assert none_correct["n_correct"] == 0
    assert none_correct["correct"]["d"] is None and none_correct["correct"]["n_classes"] is None
    assert all(v is None for v in none_correct["correct"]["coverage"].values())
    assert none_correct["all"]["answer_classes"] == 2 and none_correct["all"]["no_answer_fraction"] == 0.25
    assert none_correct["all"]["no_formula_fraction"] == 0.5

    one_correct = per_problem[("aime24", "q-one-correct")]
    assert one_correct["correct"]["coverage"]["1"] == 1.0 and one_correct["correct"]["coverage"]["2"] is None
    assert one_correct["correct"]["d"] is None  # one correct rollout: pairwise undefined

    # metrics.json: diversity added, everything else preserved; strict JSON (no NaN)
    text = (run_dir / "metrics.json").read_text()
    assert "NaN" not in text
    metrics = json.loads(text)
    assert metrics["benchmarks"]["math500"]["avg@n"] == 0.5 and metrics["benchmarks"]["math500"]["judge"] == {"x": 1}
    assert metrics["average"] == {"avg@n": 0.5} and metrics["provenance"] == {"grader": "t"}
    math_div = metrics["benchmarks"]["math500"]["diversity"]
    assert math_div == result["math500"]
    assert math_div["n_problems"] == 2 and math_div["n_samples"] == 8 and math_div["n_correct_samples"] == 4
    # benchmark value = mean over problems where defined (none-correct problem left out of "correct")
    assert math_div["correct"]["d"] == pytest.approx(all_correct["correct"]["d"])
    assert math_div["all"]["d"] == pytest.approx((all_correct["all"]["d"] + none_correct["all"]["d"]) / 2)
    assert math_div["correct"]["n_problems"] == {"with_any_sample": 1, "with_2_or_more": 1}
    settings = math_div["settings"]
    assert settings["partition"] == {"method": "embedding", "threshold": 0.95, "rule": "cosine >= threshold"}
    assert settings["encoder"]["name"] == "BagOfWordsEncoder"
    assert read_json(run_dir / "config.json")["diversity"] == settings
    assert read_json(run_dir / "config.json")["label"] == "t"


def test_answer_formula_partition_on_a_run(run_dir: Path) -> None:
    result = compute_run_diversity(run_dir, encoder=BagOfWordsEncoder(), equivalence=make_equivalence("answer-formula"),
                                   progress=False)
    per_problem = {r["problem_id"]: r for r in read_jsonl(run_dir / "diversity_per_problem.jsonl")}
    # p-none-correct: answers 1, None, 2, 2 with formula sets {}, {}, {x=7}, {x=7} -> 3 classes
    assert per_problem["p-none-correct"]["all"]["n_classes"] == 3
    assert result["math500"]["settings"]["partition"]["method"] == "answer-formula"


def test_a_graded_run_partitions_by_its_graded_answer_classes_never_by_re_extraction(run_dir: Path,
                                                                                     monkeypatch) -> None:
    # AnswerFormulaEquivalence extracts (with its own profile, boxed by default) only when a group
    # comes without answer classes; a graded run always brings graded.jsonl's, made with the run's profile.
    from dsdr_eval.diversity_metrics import partition

    def fail(*args, **kwargs):
        raise AssertionError("answer re-extracted in a graded run")

    monkeypatch.setattr(partition, "extract_answer", fail)
    compute_run_diversity(run_dir, encoder=BagOfWordsEncoder(), equivalence=make_equivalence("answer-formula"),
                          progress=False)
    per_problem = {r["problem_id"]: r for r in read_jsonl(run_dir / "diversity_per_problem.jsonl")}
    assert per_problem["p-none-correct"]["all"]["n_classes"] == 3


def test_bad_graded_line_names_file_line_and_field(tmp_path: Path) -> None:
    rows = _samples()
    del rows[3]["completion"]
    write_jsonl(tmp_path / "graded.jsonl", rows)
    with pytest.raises(DsdrError, match=r"graded\.jsonl:4:completion: missing required field 'completion'"):
        compute_run_diversity(tmp_path, encoder=BagOfWordsEncoder(), progress=False)
    rows = _samples()
    rows.append(dict(rows[-1]))
    write_jsonl(tmp_path / "graded.jsonl", rows)
    with pytest.raises(DsdrError, match="duplicate sample"):
        compute_run_diversity(tmp_path, encoder=BagOfWordsEncoder(), progress=False)
    with pytest.raises(DsdrError, match="missing graded.jsonl"):
        compute_run_diversity(_empty_dir(tmp_path), encoder=BagOfWordsEncoder(), progress=False)
    assert not (tmp_path / "diversity_per_problem.jsonl").exists()  # nothing half-written


def _empty_dir(tmp_path: Path) -> Path:
    empty = tmp_path / "empty"
    empty.mkdir()
    return empty


def _cli(module: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # loads MiniLM
def test_cli_with_the_real_minilm(run_dir: Path) -> None:
    """`dsdr-eval diversity` through the top-level dispatcher, real encoder, chunked mode."""
    proc = _cli("dsdr_eval.cli", "diversity", str(run_dir), "--no-progress", "--chunked", "--threshold", "0.8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "math500" in proc.stdout and "D_emb" in proc.stdout
    diversity = read_json(run_dir / "metrics.json")["benchmarks"]["math500"]["diversity"]
    encoder = diversity["settings"]["encoder"]
    assert encoder["name"] == "all-MiniLM-L6-v2" and encoder["truncation"] == "chunk-mean"
    assert Path(encoder["path"]).is_dir()
    assert diversity["settings"]["partition"]["threshold"] == 0.8
    assert 0.0 < diversity["all"]["d_emb"] < 1.0
    assert read_json(run_dir / "config.json")["diversity"]["encoder"]["truncation"] == "chunk-mean"


def test_cli_reports_user_errors_without_traceback(tmp_path: Path, capsys) -> None:
    from dsdr_eval.cli.diversity import run_standalone

    proc = _cli("dsdr_eval.cli", "diversity", str(tmp_path / "missing-run"), "--no-progress")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not a run directory" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    assert run_standalone([str(tmp_path), "--partition", "bogus"]) == 2
    assert "missing graded.jsonl" in capsys.readouterr().err
    write_jsonl(tmp_path / "graded.jsonl", _samples())
    assert run_standalone([str(tmp_path), "--partition", "bogus"]) == 2  # before any model is loaded
    assert "unknown method 'bogus'" in capsys.readouterr().err
    assert run_standalone([str(tmp_path), "--batch-size", "0"]) == 2
    assert "--batch-size 0" in capsys.readouterr().err


def test_nan_free_numbers_are_finite(run_dir: Path) -> None:
    result = compute_run_diversity(run_dir, encoder=BagOfWordsEncoder(), progress=False)

    def walk(value):
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, float):
            assert math.isfinite(value)

    walk(result)


def test_hostile_completions_do_not_crash(tmp_path: Path) -> None:
    hostile = ["\\[" * 100_000 + "$" * 7 + "\\begin{align}" * 1000,   # ~300 kB of unbalanced openers
               "$$" + "x" * 500_000,                                  # unclosed display math
               "\x00\ud800 <script>alert(1)</script> $a$",            # NUL, lone surrogate, markup
               "$a$"]
    rows = [{"problem_id": "h", "sample_idx": i, "gold": "1", "completion": text, "correct": i % 2 == 0,
             "status": "correct" if i % 2 == 0 else "incorrect", "answer_class": None} for i, text in enumerate(hostile)]
    # ensure_ascii: a lone surrogate can only reach graded.jsonl as a JSON escape
    (tmp_path / "graded.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = compute_run_diversity(tmp_path, encoder=BagOfWordsEncoder(), progress=False)
    assert result["default"]["n_samples"] == 4  # lines without a benchmark go under "default"
    samples = read_jsonl(tmp_path / "diversity_per_sample.jsonl")
    assert [s["n_formulas"] for s in samples] == [0, 0, 1, 1]
    assert samples[2]["d_eq"] == 0.0 and samples[3]["d_eq"] == 0.0  # "a" is shared


@pytest.mark.slow  # loads MiniLM
def test_real_encoder_accepts_lone_surrogates() -> None:
    from dsdr_eval.rundir.samples import clean_text as safe_text

    assert safe_text("ok \ud800 end") == "ok \ufffd end" and safe_text(None) == ""


def test_samples_scored_then_diversity_then_rescored(tmp_path: Path) -> None:
    """samples.jsonl -> dsdr_eval.scoring.score.score_run_dir -> compute_run_diversity -> re-score keeps it."""
    from dsdr_eval.scoring.score import score_run_dir

    completions = {
        "p1": ["$2+2=4$ so \\boxed{4}", "Adding: \\[2+2=4\\], \\boxed{4}", "I get \\boxed{5}", "\\boxed{4.0}"],
        "p2": ["$x=3$ hence \\boxed{3}", "\\boxed{7}", "no idea", "$y$ \\boxed{7}"],
    }
    gold = {"p1": "4", "p2": "3"}
    rows = [{"benchmark": "toy", "problem_id": pid, "sample_idx": 0, "phase": "pass1", "problem": "Q",
             "gold": gold[pid], "completion": "\\boxed{0}"} for pid in completions]
    rows += [{"benchmark": "toy", "problem_id": pid, "sample_idx": i, "phase": "sampling", "problem": "Q",
              "gold": gold[pid], "completion": text}
             for pid, texts in completions.items() for i, text in enumerate(texts)]
    write_jsonl(tmp_path / "samples.jsonl", rows)
    score_run_dir(tmp_path, workers=1, progress=False, bootstrap=10)
    result = compute_run_diversity(tmp_path, encoder=BagOfWordsEncoder(), equivalence=make_equivalence("answer-formula"),
                                   progress=False)
    per_problem = {r["problem_id"]: r for r in read_jsonl(tmp_path / "diversity_per_problem.jsonl")}
    # p1: answers 4, 4, 5, 4.0 -> grading puts 4 and 4.0 in one class -> 2 answer classes; 3 correct
    assert per_problem["p1"]["n_correct"] == 3 and per_problem["p1"]["all"]["answer_classes"] == 2
    # p2: answers 3, 7, none, 7 -> 2 classes, one rollout without an answer
    assert per_problem["p2"]["all"]["answer_classes"] == 2
    assert per_problem["p2"]["all"]["no_answer_fraction"] == 0.25
    score_run_dir(tmp_path, workers=1, progress=False, bootstrap=10)  # re-scoring keeps "diversity"
    assert read_json(tmp_path / "metrics.json")["benchmarks"]["toy"]["diversity"] == result["toy"]
