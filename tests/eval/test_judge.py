"""LLM-as-judge diversity: parsing, prompt budget, rollout selection, and full runs against the
fault-injecting OpenAI-compatible server (retries, counted failures, cache, key never leaked)."""

from __future__ import annotations

import argparse
import json
import logging
import random
import secrets
import time
from pathlib import Path

import pytest
from helpers.fault_server import FaultServer, response_format_type

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.jsonl import read_json, read_jsonl, write_json, write_jsonl
from dsdr_eval.cli import judge as judge_cli
from dsdr_eval.llm_judge.parse import JudgeParseError, parse_equivalence, parse_judge_response
from dsdr_eval.llm_judge.prompt import PromptBudget, build_judge_prompt, fill_template
from dsdr_eval.llm_judge.run import JudgeSettings, judge_equivalent, run_judge, select_rollouts
from dsdr_eval.llm_judge.structured import is_format_refusal
from dsdr_eval.openai_api.client import Result
from dsdr_eval.rundir.samples import as_graded
from dsdr_eval.openai_api.client import EndpointConfig, OpenAICompatClient

GOOD = '```json\n{"logic": 6, "formula": 3, "semantic": 6, "overall": 5}\n```'


# ----------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("text,expected", [
    (GOOD, (6, 3, 6, 5)),
    ('Sure! Here is my rating: {"logic": 2.5, "formula": 4, "semantic": 0, "overall": 2.17} Hope it helps.',
     (2.5, 4, 0, 2.1666666)),
    ('{"note": {"x": 1}}\n{"logic": 10, "formula": 10, "semantic": 10, "overall": 10}', (10, 10, 10, 10)),
])
def test_parse_accepts_fenced_and_embedded_objects(text, expected):
    scores = parse_judge_response(text)
    assert (scores.logic, scores.formula, scores.semantic) == pytest.approx(expected[:3])
    assert scores.overall == pytest.approx(expected[3], abs=1e-6)
    assert not scores.overall_mismatch


def test_parse_recomputes_overall_and_flags_mismatch():
    scores = parse_judge_response('{"logic": 9, "formula": 0, "semantic": 0, "overall": 8}')
    assert scores.overall == 3.0 and scores.overall_reported == 8.0 and scores.overall_mismatch
    rounded = parse_judge_response('{"logic": 7, "formula": 8, "semantic": 8, "overall": 7.7}')
    assert not rounded.overall_mismatch and rounded.overall == pytest.approx(23 / 3)


@pytest.mark.parametrize("text,reason", [
    ("", "empty_response"),
    (None, "empty_response"),
    ("The solutions are quite diverse, I would say 7/10.", "no_json_object"),
    ("{logic: 7, formula: 3}", "no_json_object"),
    ('{"logic": 7, "formula": 3, "overall": 5}', "missing_key"),
    ('{"diversity": 7}', "missing_key"),
    ('{"logic": "7", "formula": 3, "semantic": 4, "overall": 4.67}', "non_numeric"),
    ('{"logic": true, "formula": 3, "semantic": 4, "overall": 4.67}', "non_numeric"),
    ('{"logic": null, "formula": 3, "semantic": 4, "overall": 4.67}', "non_numeric"),
    ('{"logic": NaN, "formula": 3, "semantic": 4, "overall": 4.67}', "non_numeric"),
    ('{"logic": 11, "formula": 3, "semantic": 4, "overall": 6}', "out_of_range"),
    ('{"logic": 5, "formula": -1, "semantic": 4, "overall": 2.67}', "out_of_range"),
    ('{"logic": 5, "formula": 1, "semantic": 4, "overall": 70}', "out_of_range"),
])
def test_parse_rejects_with_reason(text, reason):
    with pytest.raises(JudgeParseError) as info:
        parse_judge_response(text)
    assert info.value.reason == reason


def test_parse_survives_hostile_text_quickly():
    hostile = "{" * 100_000 + '"logic": 1' + "[" * 50_000
    with pytest.raises(JudgeParseError):
        parse_judge_response(hostile)
    deep = "[" * 5000 + "{" + '"a":' * 10
    with pytest.raises(JudgeParseError):
        parse_judge_response(deep)


def test_parse_equivalence():
    assert parse_equivalence('```json\n{"equivalent": true}\n```') is True
    assert parse_equivalence('They differ. {"equivalent": false}') is False
    assert parse_equivalence('{"equivalent": "yes"}') is None
    assert parse_equivalence("same") is None


# ----------------------------------------------------------------------------- prompt
def test_prompt_truncation_is_explicit_and_fits_budget():
    budget = PromptBudget(max_rollout_chars=1500, max_prompt_chars=8000)
    rollouts = ["short one"] + ["x" * 1500 + "MIDDLE" + "y" * 1500 + "THE END"] * 5
    prompt = build_judge_prompt(r"Find $\{x\}$ with {PROBLEM} and {B} in it", rollouts, budget)
    user = prompt.messages[1]["content"]
    assert prompt.n_rollouts == 6 and prompt.n_truncated == 5
    assert prompt.rollout_char_budget < 1500  # the total budget is the binding one here
    assert len(user) <= budget.max_prompt_chars
    assert user.count("(truncated)") == 5 and user.count("characters omitted") == 5
    assert "THE END" in user and "MIDDLE" not in user  # head and tail kept, middle cut
    assert r"Find $\{x\}$ with {PROBLEM} and {B} in it" in user  # braces and placeholders left alone
    assert prompt.original_chars[0] == len("short one")


def test_fill_template_single_pass():
    assert fill_template("{A}|{B}", {"A": "{B}", "B": "b"}) == "{B}|b"


# ----------------------------------------------------------------------------- run directories
def _rows(benchmarks: dict[str, int], n: int = 4, *, with_pass1: bool = True, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for benchmark, n_problems in benchmarks.items():
        for p in range(n_problems):
            if with_pass1:
                rows.append({"benchmark": benchmark, "problem_id": f"{benchmark}-{p}", "sample_idx": 0,
                             "phase": "pass1", "problem": f"Problem {p}", "completion": "pass1 rollout",
                             "gold": str(p), "correct": True, "status": "correct"})
            idx = list(range(n))
            rng.shuffle(idx)  # file order is not sample order
            for i in idx:
                rows.append({"benchmark": benchmark, "problem_id": f"{benchmark}-{p}", "sample_idx": i,
                             "phase": "sampling", "problem": f"Problem {p} of {benchmark}",
                             "completion": f"Solution number {i}: we compute {i} + {p}. \\boxed{{{i + p}}}",
                             "gold": str(p), "correct": i % 2 == 0, "status": "correct" if i % 2 == 0 else "incorrect"})
    return rows


@pytest.fixture
def run_dir(tmp_path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "graded.jsonl", _rows({"aime24": 3, "math500": 2}))
    write_json(run / "metrics.json", {"benchmarks": {"aime24": {"avg@n": 0.5, "diversity": {"d": 0.3}},
                                                     "math500": {"avg@n": 0.7}},
                                      "average": {"avg@n": 0.6}, "provenance": {"grader": "x"}})
    write_json(run / "config.json", {"kind": "eval", "label": "t"})
    return run


def _client(server: FaultServer, **kw) -> OpenAICompatClient:
    kw.setdefault("timeout_s", 0.5)
    kw.setdefault("backoff_base_s", 0.001)
    return OpenAICompatClient(EndpointConfig(base_urls=(server.base_url,), model=server.model, **kw),
                              sleep=lambda s: None)


def test_select_rollouts_first_by_sample_idx_phase_limit_correct_only(tmp_path):
    rows = as_graded(_rows({"aime24": 3, "minerva": 2}, n=40))
    items = select_rollouts(rows, JudgeSettings(), "graded.jsonl")
    assert [(i.benchmark, i.problem_id) for i in items][:2] == [("aime24", "aime24-0"), ("aime24", "aime24-1")]
    assert all(i.sample_idx == list(range(32)) and i.n_available == 40 for i in items)
    assert all("pass1 rollout" not in t for i in items for t in i.texts)
    limited = select_rollouts(rows, JudgeSettings(benchmarks=("minerva",), limit=1, max_rollouts=5), "g")
    assert [(i.problem_id, i.sample_idx) for i in limited] == [("minerva-0", [0, 1, 2, 3, 4])]
    correct = select_rollouts(rows, JudgeSettings(correct_only=True, max_rollouts=3), "g")
    assert all(i.sample_idx == [0, 2, 4] for i in correct)
    with pytest.raises(DsdrError, match="olympiadbench"):
        select_rollouts(rows, JudgeSettings(benchmarks=("olympiadbench",)), "g")
    # the records are validated once, when read (dsdr_eval.rundir.samples), with the reader's messages
    bad = [r.to_json() for r in rows[:3]] + [{"benchmark": "aime24", "problem_id": "z", "sample_idx": 0, "gold": "1",
                                              "status": "correct", "correct": True}]
    with pytest.raises(DsdrError, match=r"g\.jsonl:4:completion: missing required field 'completion'"):
        select_rollouts(as_graded(bad, source="g.jsonl"), JudgeSettings(), "g.jsonl")
    dup = [rows[1].to_json(), rows[1].to_json()]
    with pytest.raises(DsdrError, match="duplicate sample"):
        select_rollouts(as_graded(dup, source="g.jsonl"), JudgeSettings(), "g.jsonl")


def test_run_with_transient_faults_counts_eventual_success(run_dir):
    with FaultServer(script=["429", "500", "timeout", "garbage"], default="ok", reply=GOOD, delay_s=2.0) as server:
        blocks = run_judge(run_dir, _client(server, max_concurrency=2), JudgeSettings(), progress=False)
        n_requests = len(server.completion_requests())
        first_body = server.completion_requests()[0].body
    assert n_requests == 5 + 4  # 5 problems + 4 retried faults
    assert first_body["model"] == "fault-model" and first_body["temperature"] == 0.0
    assert first_body["messages"][0]["role"] == "system"
    assert blocks["aime24"]["n_ok"] == 3 and blocks["math500"]["n_ok"] == 2
    assert blocks["aime24"]["overall"] == pytest.approx(5.0) and blocks["aime24"]["logic"] == pytest.approx(6.0)
    assert blocks["aime24"]["n_failed"] == 0 and blocks["aime24"]["n_rollouts_judged"] == 12
    records = read_jsonl(run_dir / "judge.jsonl")
    assert [(r["benchmark"], r["problem_id"]) for r in records] == [
        ("aime24", "aime24-0"), ("aime24", "aime24-1"), ("aime24", "aime24-2"), ("math500", "math500-0"),
        ("math500", "math500-1")]
    assert sum(r["attempts"] for r in records) == 9
    assert all(r["status"] == "ok" and r["scores"]["overall"] == 5.0 and not r["cache_hit"] for r in records)
    assert records[0]["raw_response_excerpt"] == GOOD and records[0]["sample_idx"] == [0, 1, 2, 3]

    metrics = read_json(run_dir / "metrics.json")
    assert metrics["benchmarks"]["aime24"]["avg@n"] == 0.5 and metrics["benchmarks"]["aime24"]["diversity"] == {"d": 0.3}
    assert metrics["average"] == {"avg@n": 0.6} and metrics["provenance"] == {"grader": "x"}
    assert metrics["benchmarks"]["math500"]["judge"]["judge_model"] == "fault-model"
    config = read_json(run_dir / "config.json")
    assert config["kind"] == "eval" and "Rate how DIVERSE" in config["judge"]["prompt"]["user_template"]
    assert config["judge"]["settings"]["max_rollouts"] == 32


def test_rerun_hits_cache_and_sends_nothing(run_dir, tmp_path):
    cache_dir = tmp_path / "cache"
    with FaultServer(default="ok", reply=GOOD) as server:
        run_judge(run_dir, _client(server), JudgeSettings(), cache_dir=cache_dir, progress=False)
        assert len(server.completion_requests()) == 5
        blocks = run_judge(run_dir, _client(server), JudgeSettings(), cache_dir=cache_dir, progress=False)
        assert len(server.completion_requests()) == 5  # no new requests
        assert blocks["aime24"]["n_cache_hits"] == 3 and blocks["aime24"]["overall"] == pytest.approx(5.0)
        assert all(r["cache_hit"] for r in read_jsonl(run_dir / "judge.jsonl"))
        # different params -> different key -> new requests; --no-cache -> always new requests
        run_judge(run_dir, _client(server), JudgeSettings(max_tokens=77), cache_dir=cache_dir, progress=False)
        assert len(server.completion_requests()) == 10
        run_judge(run_dir, _client(server), JudgeSettings(use_cache=False), progress=False)
        assert len(server.completion_requests()) == 15
    assert len(read_jsonl(cache_dir / "judge_cache.jsonl")) == 10
    assert not (run_dir / "judge_cache.jsonl").exists()


def test_exhausted_retries_and_bad_replies_are_counted_never_zero(run_dir):
    def reply(body):
        text = body["messages"][1]["content"]
        if "Problem 0 of aime24" in text:
            return '{"logic": 12, "formula": 3, "semantic": 4, "overall": 6.33}'
        if "Problem 1 of aime24" in text:
            return "These are all the same approach. Score: 2"
        if "Problem 2 of aime24" in text:
            return '{"logic": 2, "formula": 4, "semantic": 6, "overall": 9}'
        return GOOD

    with FaultServer(default="ok", reply=reply) as server:
        blocks = run_judge(run_dir, _client(server), JudgeSettings(), progress=False)
    aime = blocks["aime24"]
    assert aime["n_ok"] == 1 and aime["n_failed"] == 2
    assert aime["failed_by_reason"] == {"parse:out_of_range": 1, "parse:no_json_object": 1}
    assert aime["overall"] == pytest.approx(4.0) and aime["n_overall_mismatch"] == 1
    # every call fails after retries: counted by reason, means are null (not 0), nothing dropped
    with FaultServer(default="503") as server:
        blocks = run_judge(run_dir, _client(server, max_retries=2), JudgeSettings(use_cache=False), progress=False)
        assert len(server.completion_requests()) == 5 * 3
    for block in blocks.values():
        assert block["n_ok"] == 0 and block["overall"] is None and block["logic"] is None
        assert block["failed_by_reason"] == {"http_error:http_503": block["n_problems"]}
    records = read_jsonl(run_dir / "judge.jsonl")
    assert len(records) == 5 and all(r["status"] == "failed" and r["attempts"] == 3 for r in records)


def test_correct_only_skips_problems_without_enough_correct_rollouts(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = _rows({"aime25": 2}, n=4, with_pass1=False)
    for row in rows:  # problem aime25-1: one correct rollout only
        if row["problem_id"] == "aime25-1":
            row["correct"] = row["sample_idx"] == 3
    write_jsonl(run / "graded.jsonl", rows)
    with FaultServer(reply=GOOD) as server:
        blocks = run_judge(run, _client(server), JudgeSettings(correct_only=True), progress=False)
        assert len(server.completion_requests()) == 1
    assert blocks["aime25"]["n_ok"] == 1 and blocks["aime25"]["skipped_by_reason"] == {"too_few_rollouts": 1}
    assert blocks["aime25"]["n_rollouts_judged"] == 2
    assert not (run / "config.json").exists()  # only updated when present
    assert read_json(run / "metrics.json")["benchmarks"]["aime25"]["judge"]["n_skipped"] == 1


def test_samples_jsonl_fallback_and_missing_inputs(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(DsdrError, match="neither graded.jsonl nor samples.jsonl"):
        run_judge(run, None, JudgeSettings())  # type: ignore[arg-type]
    rows = [{k: v for k, v in r.items() if k != "correct"} for r in _rows({"minerva": 1}, with_pass1=False)]
    write_jsonl(run / "samples.jsonl", rows)
    with pytest.raises(DsdrError, match="--correct-only needs graded.jsonl"):
        run_judge(run, None, JudgeSettings(correct_only=True))  # type: ignore[arg-type]
    with FaultServer(reply=GOOD) as server:
        blocks = run_judge(run, _client(server), JudgeSettings(), progress=False)
    assert blocks["minerva"]["n_ok"] == 1 and blocks["minerva"]["source"] == "samples.jsonl"


def test_api_key_never_written_or_logged(run_dir, tmp_path, monkeypatch, caplog):
    key = "sk-judge-" + secrets.token_hex(20)
    monkeypatch.setenv("DSDR_JUDGE_TEST_KEY", key)
    caplog.set_level(logging.DEBUG)
    cache_dir = tmp_path / "cache"
    with FaultServer(script=["429", "echo_auth"], default="ok", reply=GOOD) as server:
        run_judge(run_dir, _client(server, api_key_env="DSDR_JUDGE_TEST_KEY", max_concurrency=1),
                  JudgeSettings(), cache_dir=cache_dir, progress=False)
        assert {r.headers["authorization"] for r in server.completion_requests()} == {f"Bearer {key}"}
    records = read_jsonl(run_dir / "judge.jsonl")
    failed = [r for r in records if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["reason"] == "http_error:http_400" and "Bearer ***" in failed[0]["error"]
    written = [p for d in (run_dir, cache_dir) for p in d.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"judge.jsonl", "metrics.json", "config.json", "judge_cache.jsonl"}
    for path in written:
        assert key not in path.read_text(encoding="utf-8"), path
    assert "DSDR_JUDGE_TEST_KEY" in (run_dir / "config.json").read_text()  # the variable's name is recorded
    assert key not in caplog.text


def test_cli_end_to_end(run_dir, monkeypatch, capsys):
    parser = argparse.ArgumentParser()
    judge_cli.add_arguments(parser)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FaultServer(script=["500"], default="ok", reply=GOOD) as a, FaultServer(reply=GOOD) as b:
        args = parser.parse_args([str(run_dir), "--judge-model", "fault-model", "--judge-base-url",
                                  f"{a.base_url},{b.base_url}", "--benchmarks", "aime24", "--limit", "2",
                                  "--max-rollouts", "3", "--backoff-base", "0", "--no-progress"])
        assert judge_cli.main(args) == 0
        assert len(a.completion_requests()) + len(b.completion_requests()) == 3
        assert {r.headers["authorization"] for r in a.completion_requests()} <= {"Bearer EMPTY"}
    records = read_jsonl(run_dir / "judge.jsonl")
    assert [r["problem_id"] for r in records] == ["aime24-0", "aime24-1"]
    assert all(r["n_rollouts"] == 3 for r in records)
    metrics = read_json(run_dir / "metrics.json")
    assert "judge" in metrics["benchmarks"]["aime24"] and "judge" not in metrics["benchmarks"]["math500"]
    assert "LLM-judge diversity" in capsys.readouterr().err
    with FaultServer(reply=GOOD) as server:  # judging another benchmark keeps aime24's records
        args = parser.parse_args([str(run_dir), "--judge-model", "fault-model", "--judge-base-url",
                                  server.base_url, "--benchmarks", "math500", "--no-progress"])
        assert judge_cli.main(args) == 0
    assert [r["problem_id"] for r in read_jsonl(run_dir / "judge.jsonl")] == [
        "aime24-0", "aime24-1", "math500-0", "math500-1"]
    with FaultServer(default="400") as server:
        args = parser.parse_args([str(run_dir), "--judge-model", "m", "--judge-base-url", server.base_url,
                                  "--no-progress", "--no-cache"])
        assert judge_cli.main(args) == 1  # everything failed: non-zero exit, reasons recorded
    assert len(read_jsonl(run_dir / "judge.jsonl")) == 5
    assert json.loads((run_dir / "metrics.json").read_text())["benchmarks"]["math500"]["judge"]["n_failed"] == 2


def test_cli_request_timeout_bounds_each_attempt_against_a_trickling_server(run_dir, monkeypatch):
    """Issue 24: `judge --request-timeout 8 --max-retries 1` against a server trickling one byte
    every 2 s still waited at 300 s. Here 0.5 s and a byte every 0.1 s (a reply takes ~30 s)."""
    parser = argparse.ArgumentParser()
    judge_cli.add_arguments(parser)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FaultServer(default="trickle", reply=GOOD, trickle_s=0.1) as server:
        args = parser.parse_args([str(run_dir), "--judge-model", "fault-model", "--judge-base-url", server.base_url,
                                  "--benchmarks", "aime24", "--limit", "1", "--max-rollouts", "2",
                                  "--request-timeout", "0.5", "--max-retries", "1", "--retry-backoff", "0",
                                  "--no-progress", "--no-cache"])
        started = time.monotonic()
        assert judge_cli.main(args) == 1  # everything failed, and said so
        elapsed = time.monotonic() - started
        attempts = server.completion_requests()
    assert len(attempts) == 2  # one request, two attempts, the first ended by its 0.5 s
    assert attempts[1].time - attempts[0].time < 0.5 + 1.0 and elapsed < 30, elapsed
    record = read_jsonl(run_dir / "judge.jsonl")[0]
    assert "timed out" in json.dumps(record)


def test_judge_equivalent_hook():
    with FaultServer(script=["ok"], default="garbage", reply='{"equivalent": true}') as server:
        client = _client(server, max_retries=0)
        assert judge_equivalent(client, "x = 1 by algebra", "x = 1 by algebra again") is True
        assert judge_equivalent(client, "a", "b") is None  # garbage body: undecided, not a guess
    with FaultServer(reply='Different methods. {"equivalent": false}') as server:
        assert judge_equivalent(_client(server), "a", "b") is False
        body = server.completion_requests()[0].body
        assert body["temperature"] == 0.0 and "## Solution B\nb" in body["messages"][1]["content"]


def _judge_args(run_dir: Path, server: FaultServer, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    judge_cli.add_arguments(parser)
    return parser.parse_args([str(run_dir), "--judge-model", server.model, "--judge-base-url", server.base_url,
                              "--backoff-base", "0", "--max-retries", "0", "--no-progress", *extra])


def _failing_for(marks: list[str]):
    """A reply function: unparseable text when the prompt holds one of ``marks`` (else GOOD)."""
    def reply(body):
        text = body["messages"][1]["content"]
        return "no scores, sorry" if any(mark in text for mark in marks) else GOOD
    return reply


def test_cli_exits_1_when_any_problem_failed_unless_allow_failures(tmp_path, monkeypatch, capsys):
    """18 of 32 problems failing used to exit 0; the failure-reason column is printed in full off a terminal."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "graded.jsonl", _rows({"aime24": 16, "minerva": 16}, n=3, with_pass1=False))
    # 15 unparseable replies + 3 HTTP 503 (one request at a time: they hit aime24-0..2) = 18 of 32
    marks = [f"Problem {p} of {b}" for b in ("aime24", "minerva") for p in range(9, 16)] + ["Problem 8 of aime24"]
    with FaultServer(script=["503"] * 3, default="ok", reply=_failing_for(marks)) as server:
        assert judge_cli.main(_judge_args(run, server, "--concurrency", "1")) == 1
        err = capsys.readouterr().err
        assert "18 of 32 problems failed" in err and "--allow-failures" in err
        # the full reason list of one benchmark, on one row or folded, but never cut with an ellipsis
        assert "…" not in err
        joined = "".join(line.strip(" │┃") for line in err.splitlines())
        assert "http_error:http_503=" in joined and "parse:no_json_object=" in joined
        blocks = read_json(run / "metrics.json")["benchmarks"]
        assert sum(b["judge"]["n_failed"] for b in blocks.values()) == 18
        # same failures (cached replies, HTTP failures retried and now answered), allowed: exit 0
        assert judge_cli.main(_judge_args(run, server, "--allow-failures")) == 0
        assert "15 of 32 problems failed" in capsys.readouterr().err  # the 3 HTTP failures were retried
    with FaultServer(default="400") as server:  # nothing judged at all is never a success
        assert judge_cli.main(_judge_args(run, server, "--allow-failures", "--no-cache")) == 1


def test_retry_failed_asks_again_only_for_unparseable_cached_replies(run_dir):
    broken = ["Problem 0 of", "Problem 1 of"]  # aime24-0/1, math500-0/1: unparseable replies (cached: HTTP 200)
    with FaultServer(reply=_failing_for(broken)) as server:
        blocks = run_judge(run_dir, _client(server), JudgeSettings(), progress=False)
        assert sum(b["n_failed"] for b in blocks.values()) == 4 and len(server.completion_requests()) == 5
    with FaultServer(reply=GOOD) as fixed:
        # without --retry-failed the cached bad replies stay failed and nothing is sent
        blocks = run_judge(run_dir, _client(fixed), JudgeSettings(), progress=False)
        assert sum(b["n_failed"] for b in blocks.values()) == 4 and not fixed.completion_requests()
        blocks = run_judge(run_dir, _client(fixed), JudgeSettings(), progress=False, retry_failed=True)
        assert len(fixed.completion_requests()) == 4  # only the failed ones
        assert sum(b["n_failed"] for b in blocks.values()) == 0 and blocks["aime24"]["n_cache_hits"] == 1
        # the new replies replaced the cached ones: a plain rerun is all ok and sends nothing
        blocks = run_judge(run_dir, _client(fixed), JudgeSettings(), progress=False)
        assert len(fixed.completion_requests()) == 4
        assert sum(b["n_ok"] for b in blocks.values()) == 5 and blocks["aime24"]["n_cache_hits"] == 3
    assert all(r["status"] == "ok" for r in read_jsonl(run_dir / "judge.jsonl"))


# ----------------------------------------------------------------------------- structured outputs
PROSE = "These solutions look fairly diverse to me, maybe 7 out of 10."


def test_requests_carry_the_verdict_schema_and_a_constrained_reply_parses(run_dir):
    """A server that decodes under the schema it is sent (schema_reply) answers prose without one."""
    with FaultServer(reply=PROSE, schema_reply=True) as server:
        blocks = run_judge(run_dir, _client(server, max_concurrency=2), JudgeSettings(), progress=False)
        bodies = [r.body for r in server.completion_requests()]
    assert len(bodies) == 5
    for body in bodies:
        response_format = body["response_format"]
        assert response_format["type"] == "json_schema" and response_format["json_schema"]["strict"] is True
        schema = response_format["json_schema"]["schema"]
        assert schema["required"] == ["logic", "formula", "semantic", "overall"]
        assert schema["additionalProperties"] is False and schema["type"] == "object"
        assert all(schema["properties"][k] | {"description": ""} == {"type": "number", "minimum": 0, "maximum": 10,
                                                                      "description": ""} for k in schema["required"])
    for block in blocks.values():
        assert block["n_ok"] == block["n_problems"] and block["overall"] == pytest.approx(5.0)
        assert block["structured_output"]["mode"] == "json_schema" and block["structured_output"]["refused"] == []
        assert block["structured_output"]["detected_by"] == "probe request"
        assert block["n_by_response_format"] == {"json_schema": block["n_problems"]}
    assert all(r["response_format"] == "json_schema" for r in read_jsonl(run_dir / "judge.jsonl"))
    assert read_json(run_dir / "config.json")["judge"]["structured_output"]["mode"] == "json_schema"
    # plain text, asked explicitly: no response_format, the prose does not parse (a counted failure)
    with FaultServer(reply=PROSE, schema_reply=True) as server:
        blocks = run_judge(run_dir, _client(server), JudgeSettings(response_format="text", use_cache=False),
                           progress=False)
        assert all("response_format" not in r.body for r in server.completion_requests())
    assert all(b["n_ok"] == 0 and b["failed_by_reason"] == {"parse:no_json_object": b["n_problems"]}
               for b in blocks.values())


@pytest.mark.parametrize("accepted,mode,refused", [
    (("json_object", "text"), "json_object", ["json_schema"]),
    (("text",), "text", ["json_schema", "json_object"]),
])
def test_a_server_refusing_the_schema_falls_back_once_and_it_is_recorded(run_dir, accepted, mode, refused):
    with FaultServer(reply=GOOD, accept_formats=accepted) as server:
        blocks = run_judge(run_dir, _client(server, max_concurrency=4), JudgeSettings(), progress=False)
        # the probe (first request, alone) walks down the ladder; the other 4 go out in the mode found
        assert [response_format_type(r.body) for r in server.completion_requests()] == refused + [mode] * 5
        assert server.behaviours() == ["refused_format"] * len(refused) + ["ok"] * 5
        again = run_judge(run_dir, _client(server), JudgeSettings(), progress=False)
        assert len(server.completion_requests()) == len(refused) + 5  # the rerun sends nothing
    for block in (blocks["aime24"], again["aime24"]):
        assert block["n_ok"] == 3 and block["n_by_response_format"] == {mode: 3}
    first, rerun = blocks["aime24"]["structured_output"], again["aime24"]["structured_output"]
    assert first["mode"] == mode and first["detected_by"] == "probe request"
    assert [r["mode"] for r in first["refused"]] == refused and not any(r["from_cache"] for r in first["refused"])
    assert all("response_format" in r["error"] and "HTTP 400" in r["error"] for r in first["refused"])
    assert rerun["mode"] == mode and rerun["detected_by"] == "cached reply"
    assert [r["mode"] for r in rerun["refused"]] == refused and all(r["from_cache"] for r in rerun["refused"])
    recorded = read_json(run_dir / "config.json")["judge"]["structured_output"]
    assert recorded["mode"] == mode and recorded["requested"] == "auto"
    assert recorded["ladder"] == ["json_schema", "json_object", "text"]


def test_other_400s_and_an_explicit_mode_never_change_the_format(run_dir):
    with FaultServer(default="400") as server:  # "injected fault 400": not about the response format
        blocks = run_judge(run_dir, _client(server), JudgeSettings(use_cache=False), progress=False)
        assert [response_format_type(r.body) for r in server.completion_requests()] == ["json_schema"] * 5
    assert blocks["aime24"]["failed_by_reason"] == {"http_error:http_400": 3}
    assert blocks["aime24"]["structured_output"]["mode"] is None  # never detected: nothing answered
    with FaultServer(reply=GOOD, accept_formats=("text",)) as server:
        blocks = run_judge(run_dir, _client(server), JudgeSettings(response_format="json_schema", use_cache=False),
                           progress=False)
        assert len(server.completion_requests()) == 5
    assert blocks["aime24"]["failed_by_reason"] == {"http_error:http_400": 3}
    assert blocks["aime24"]["structured_output"]["ladder"] == ["json_schema"]
    # a reply under the schema is still validated: out of range / missing keys stay failures
    with FaultServer(reply='{"logic": 11, "formula": 3, "semantic": 4, "overall": 6}') as server:
        blocks = run_judge(run_dir, _client(server), JudgeSettings(use_cache=False), progress=False)
    assert blocks["math500"]["failed_by_reason"] == {"parse:out_of_range": 2}


@pytest.mark.parametrize("status,error,refusal", [
    (400, "HTTP 400 (u): Error code: 400 - Invalid parameter: 'response_format' of type 'json_schema' is not "
          "supported with this model.", True),
    (400, "HTTP 400 (u): The provided JSON schema contains features not supported by xgrammar.", True),
    (422, "HTTP 422 (u): guided decoding is not available", True),
    (400, "HTTP 400 (u): This model's maximum context length is 2048 tokens.", False),
    (500, "HTTP 500 (u): response_format crashed the server", False),
])
def test_format_refusal_is_a_400_naming_the_format(status, error, refusal):
    result = Result(ok=False, response=None, error=error, attempts=1, base_url="u", error_kind=f"http_{status}",
                    status_code=status)
    assert is_format_refusal(result) is refusal


def test_cli_response_format_options(run_dir, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for extra, expected in ((["--response-format", "json_object"], "json_object"), (["--json-mode"], "json_object"),
                            (["--response-format", "text"], "text"), ([], "json_schema")):
        with FaultServer(reply=GOOD) as server:
            assert judge_cli.main(_judge_args(run_dir, server, "--no-cache", *extra)) == 0
            assert {response_format_type(r.body) for r in server.completion_requests()} == {expected}
        assert read_json(run_dir / "config.json")["judge"]["settings"]["response_format"] == (
            expected if extra else "auto")
    with FaultServer(reply=GOOD) as server, pytest.raises(DsdrError, match="--json-mode contradicts"):
        judge_cli.main(_judge_args(run_dir, server, "--json-mode", "--response-format", "json_schema"))
    with FaultServer(reply=GOOD) as server, pytest.raises(DsdrError, match="response format must be one of auto"):
        judge_cli.main(_judge_args(run_dir, server, "--response-format", "yaml"))
