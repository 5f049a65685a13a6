"""The judge against a real OpenAI-compatible server: `vllm serve` of SmolLM2-135M (tests/conftest.py).

SmolLM2-135M rarely writes the requested JSON: the point is that every problem ends up either
scored or counted as a failure with a reason, with no crash, and that a rerun is served from the
cache without new requests."""

from __future__ import annotations

import pytest

from dsdr_eval.jsonl import read_json, read_jsonl, write_jsonl
from dsdr_eval.judge.prompt import PromptBudget
from dsdr_eval.judge.run import JudgeSettings, judge_equivalent, run_judge
from dsdr_eval.openai_client import EndpointConfig, OpenAICompatClient

pytestmark = pytest.mark.vllm

ROLLOUTS = [
    "We add 2 and 3 to get 5. The answer is \\boxed{5}.",
    "Counting on from 2: 3, 4, 5. So the sum is \\boxed{5}.",
    "Let x = 2 + 3. Since 2 + 2 = 4, x = 4 + 1 = 5, hence \\boxed{5}.",
]


def test_judge_real_server_counts_every_problem_and_caches(vllm_server, tmp_path):
    base_url, model = vllm_server
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"benchmark": "aime24", "problem_id": f"p{p}", "sample_idx": i, "phase": "sampling",
             "problem": f"What is 2 + {p + 3}?", "completion": text.replace("3", str(p + 3)), "gold": str(p + 5),
             "correct": True, "status": "correct"}
            for p in range(2) for i, text in enumerate(ROLLOUTS)]
    write_jsonl(run / "graded.jsonl", rows)
    client = OpenAICompatClient(EndpointConfig(base_urls=(base_url,), model=model, timeout_s=120, max_retries=1,
                                               max_concurrency=2))
    settings = JudgeSettings(max_tokens=64, budget=PromptBudget(max_rollout_chars=400, max_prompt_chars=3500))
    block = run_judge(run, client, settings, progress=False)["aime24"]
    print(f"SmolLM2 judge: n_ok={block['n_ok']} failed_by_reason={block['failed_by_reason']} "
          f"overall={block['overall']}")  # visible with -s; informative only
    for record in read_jsonl(run / "judge.jsonl"):
        print("  reply excerpt:", repr((record.get("raw_response_excerpt") or "")[:200]))
    assert block["n_problems"] == 2 and block["n_ok"] + block["n_failed"] == 2
    assert sum(block["failed_by_reason"].values()) == block["n_failed"]
    if block["n_ok"]:
        assert 0.0 <= block["overall"] <= 10.0
    else:
        assert block["overall"] is None
    records = read_jsonl(run / "judge.jsonl")
    for record in records:
        assert record["status"] in {"ok", "failed"}
        if record["status"] == "failed":
            assert record["reason"].startswith(("parse:", "http_error:")) and record["scores"] is None
        else:
            assert 0.0 <= record["scores"]["overall"] <= 10.0
    # A rerun is answered from the cache (same prompt + params -> same key), whatever the judge said.
    answered = [r for r in records if not r["reason"] or r["reason"].startswith("parse:")]
    rerun = run_judge(run, client, settings, progress=False)["aime24"]
    assert rerun["n_cache_hits"] == len(answered)
    assert read_json(run / "metrics.json")["benchmarks"]["aime24"]["judge"]["n_problems"] == 2

    verdict = judge_equivalent(client, ROLLOUTS[0], ROLLOUTS[2], max_tokens=16)
    assert verdict in (True, False, None)
