"""`dsdr-eval run --backend openai`: fault injection (429/500/timeout/garbage), failure log and
retry-on-rerun, several base URLs, key hygiene; and a real `vllm serve` (marked vllm)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.fault_server import FaultServer

from dsdr_eval.run.evaluation import run_evaluation
from dsdr_eval.run.finish import RunOutcome
from dsdr_eval.options.commands import RunOptions
from dsdr_eval.cli.run import print_outcome
from dsdr_eval.rundir.jsonl import read_json, read_jsonl

SECRET = "sk-test-DO-NOT-LEAK-4242"


def _run(out: Path, data_dir: Path, urls: list[str], model: str, **options: Any) -> RunOutcome:
    return run_evaluation(RunOptions(model=model, backend="openai", benchmarks=["math500"], limit=2, protocol="quick",
                                     n=2, max_tokens=16, data_dir=str(data_dir), out=str(out), no_diversity=True,
                                     no_progress=True, api_key_env="DSDR_TEST_KEY", base_url=list(urls), **options),
                          command=["test_backend_openai"])


def _keys(rows):
    return [(r["benchmark"], r["phase"], r["problem_id"], r["sample_idx"]) for r in rows]


def _gold_reply(body: dict) -> str:
    return "The answer is \\boxed{42}."


def test_faults_are_retried_logged_and_filled_by_a_rerun(tmp_path, data_dir, monkeypatch, capsys):
    monkeypatch.setenv("DSDR_TEST_KEY", SECRET)
    out = tmp_path / "run"
    # concurrency 1 makes the order deterministic: request 1 meets 500 x3 (all attempts) and fails;
    # request 2 meets 429, a timeout, then a garbage 200 body and fails; the other 4 succeed.
    script = ["500", "500", "500", "429", "timeout", "garbage"]
    with FaultServer(script=script, default="ok", reply=_gold_reply, delay_s=3.0, retry_after="0") as server:
        first = _run(out, data_dir, [server.base_url], server.model, max_concurrency=1,
                     max_retries=2, timeout_s=0.5, backoff_base_s=0.01)
        assert server.behaviours()[:6] == script
        assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert first.exit_code == 1 and first.n_failed == 2 and first.n_missing == 2
    samples = read_jsonl(out / "samples.jsonl")
    failures = read_jsonl(out / "failures.jsonl")
    assert len(samples) == 4 and len(failures) == 2
    assert not set(_keys(samples)) & set(_keys(failures))  # failed samples are not written
    assert {f["attempts"] for f in failures} == {3}
    assert any("500" in f["error"] for f in failures)
    assert all(r["completion"] == "The answer is \\boxed{42}." and r["finish_reason"] == "stop" for r in samples)
    # the request carried the sample's sampling settings and seed
    bodies = [r.body for r in server.completion_requests() if r.behaviour == "ok"]
    assert {b["seed"] for b in bodies} == {r["seed"] for r in samples}
    assert all(b["max_tokens"] == 16 and b["n"] == 1 and b["messages"][0]["role"] == "user" for b in bodies)
    every = [r.body for r in server.completion_requests()]
    assert {(b["temperature"], b.get("top_p")) for b in every} == {(0.1, 0.9), (0.7, 0.9)}
    assert (out / "metrics.json").exists()
    print_outcome(first)  # what `dsdr-eval run` prints after such a run
    assert "rerun the same command" in capsys.readouterr().out

    with FaultServer(default="ok", reply=_gold_reply) as server:
        second = _run(out, data_dir, [server.base_url], server.model)
        assert len(server.completion_requests()) == 2  # only the missing samples
    assert second.exit_code == 0 and second.n_missing == 0
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == 6 == len(set(_keys(samples)))
    # the key is never written anywhere in the run directory
    for path in out.iterdir():
        assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path
    assert read_json(out / "config.json")["backend"]["api_key_env"] == "DSDR_TEST_KEY"


def test_request_timeout_bounds_each_attempt_against_a_trickling_server(tmp_path, data_dir, monkeypatch):
    # Issue 24: a byte every 0.1 s never trips a 0.5 s per-read timeout (a reply takes ~30 s);
    # the first request's two attempts trickle (body, then headers) and time out at 0.5 s each.
    monkeypatch.setenv("DSDR_TEST_KEY", SECRET)
    with FaultServer(script=["trickle", "trickle_head"], default="ok", reply=_gold_reply, trickle_s=0.1) as server:
        started = time.monotonic()
        result = _run(tmp_path / "run", data_dir, [server.base_url], server.model, max_concurrency=1,
                      max_retries=1, timeout_s=0.5, backoff_base_s=0.0)
        elapsed = time.monotonic() - started
        attempts = server.completion_requests()
    assert attempts[1].time - attempts[0].time < 0.5 + 1.0  # the first attempt ended by its 0.5 s
    assert result.exit_code == 1 and result.n_failed == 1
    failure = read_jsonl(tmp_path / "run" / "failures.jsonl")[0]
    assert failure["attempts"] == 2 and "timed out" in failure["error"]
    assert elapsed < 30, elapsed


def test_requests_are_spread_over_several_base_urls(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("DSDR_TEST_KEY", SECRET)
    with FaultServer(reply=_gold_reply) as a, FaultServer(reply=_gold_reply) as b:
        urls = [a.base_url, b.base_url]
        result = _run(tmp_path / "run", data_dir, urls, a.model, api="completions",
                      prompt_mode="raw")
        n_a, n_b = len(a.completion_requests()), len(b.completion_requests())
        assert n_a + n_b == 6 and n_a >= 2 and n_b >= 2
        assert all(r.body["prompt"].startswith("Problem: ") for r in a.completion_requests())
    assert result.exit_code == 0
    assert read_json(tmp_path / "run" / "config.json")["backend"]["base_urls"] == urls


@pytest.mark.vllm
def test_against_a_real_vllm_server(tmp_path, data_dir, vllm_server, smollm2_dir, monkeypatch):
    monkeypatch.setenv("DSDR_TEST_KEY", SECRET)
    base_url, served = vllm_server
    chat = _run(tmp_path / "chat", data_dir, [base_url], served)
    assert chat.exit_code == 0
    rows = read_jsonl(tmp_path / "chat" / "samples.jsonl")
    assert len(rows) == 6 and len(set(_keys(rows))) == 6
    assert all(r["finish_reason"] in ("stop", "length") and 1 <= r["n_completion_tokens"] <= 16 for r in rows)
    assert all(r["n_prompt_tokens"] > 20 for r in rows)
    assert len({r["completion"] for r in rows if r["phase"] == "sampling"}) > 1
    # completions API with the local tokenizer's chat template
    comp = _run(tmp_path / "comp", data_dir, [base_url], served, api="completions",
                tokenizer=str(smollm2_dir), extra_body=json.dumps({"add_special_tokens": False}))
    assert comp.exit_code == 0
    rows = read_jsonl(tmp_path / "comp" / "samples.jsonl")
    assert len(rows) == 6 and all(r["prompt"].startswith("<|im_start|>") for r in rows)
    assert read_json(tmp_path / "comp" / "config.json")["template"]["chat"] is True
