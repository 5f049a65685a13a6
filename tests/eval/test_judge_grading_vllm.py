"""`score --judge-grading rejected` end to end against a real `vllm serve` of SmolLM2-135M on CPU
(tests/conftest.py's ``vllm_server``). A 135M model's verdicts are noise: the test checks the
plumbing (who is asked, what is stored, that `correct` stays symbolic, the cache), not the verdicts."""

from __future__ import annotations

import json

import pytest

from dsdr_eval import cli
from dsdr_eval.rundir.jsonl import read_json, read_jsonl, write_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

ROWS = [("p0", "5", "5"), ("p0", "5", "6"), ("p1", "y = C_1 e^{x} + C_2 e^{-x}", "y = C_2 e^{x} + C_1 e^{-x}"),
        ("p1", "y = C_1 e^{x} + C_2 e^{-x}", "y = e^{2x}"), ("p2", "12", None)]


def test_score_judge_grading_rejected_real_server(vllm_server, tmp_path, capsys):
    base_url, model = vllm_server
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "samples.jsonl", [
        {"benchmark": "tiny", "problem_id": pid, "sample_idx": i, "problem": f"Problem {pid}.", "gold": gold,
         "completion": f"Thus \\boxed{{{answer}}}." if answer else "no idea"}
        for i, (pid, gold, answer) in enumerate(ROWS)])

    def score() -> int:
        return cli.main(["score", str(run), "--workers", "1", "--bootstrap", "0", "--no-progress",
                         "--judge-grading", "rejected", "--judge-model", model, "--judge-base-url", base_url,
                         "--max-concurrency", "2", "--request-timeout", "120", "--max-retries", "1"])

    assert score() == 0, capsys.readouterr().err
    graded = read_jsonl(run / "graded.jsonl")
    print("SmolLM2 answer verdicts:", json.dumps([(r["extracted"], r["correct"], r["judge_verdict"], r["judge_note"])
                                                 for r in graded]))
    rejected = [r for r in graded if not r["correct"] and r["extracted"] is not None]
    assert rejected and any(r["correct"] for r in graded)
    for record in graded:
        assert record["judge_model"] == model and record["judge_verdict"] in (True, False, None)
        if record in rejected:  # asked: a verdict or a counted unsure, never unavailable on a live server
            assert not record["judge_note"].startswith(("not asked", "unavailable"))
        else:
            assert record["judge_note"].startswith("not asked") and record["judge_verdict"] is None
    metrics = read_json(run / "metrics.json")
    block = metrics["benchmarks"]["tiny"]["judge_grading"]
    assert block["n_asked"] == len(rejected) and block["n_unavailable"] == 0
    assert block["accuracy"]["symbolic"] == pytest.approx(sum(r["correct"] for r in graded) / len(graded))
    judged_yes = sum(r["judge_verdict"] is True for r in rejected)
    assert block["n_disagree"] == judged_yes
    assert block["accuracy"]["any"] == pytest.approx((sum(r["correct"] for r in graded) + judged_yes) / len(graded))
    assert metrics["provenance"]["judge_grading"]["structured_output"]["mode"] in ("json_schema", "json_object", "text")
    # a rerun is served from judge_cache.jsonl: the same verdicts, every call a cache hit
    assert score() == 0
    assert [r["judge_verdict"] for r in read_jsonl(run / "graded.jsonl")] == [r["judge_verdict"] for r in graded]
    calls = read_json(run / "metrics.json")["provenance"]["judge_grading"]["calls"]
    assert calls["cache_hits"] == calls["asked"] == len({r["extracted"] for r in rejected})
