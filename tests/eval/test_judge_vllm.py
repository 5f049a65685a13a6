"""The judge against a real OpenAI-compatible server: `vllm serve` of SmolLM2-135M (tests/conftest.py).

SmolLM2-135M rarely writes the requested JSON in plain text: the point of the first test is that
every problem ends up either scored or counted as a failure with a reason, with no crash, and that
a rerun is served from the cache without new requests. The structured-output tests send the
reply's JSON schema (vLLM structured outputs): then every problem gets a verdict and every pair a
decision; the plain-text figures are printed beside them (visible with -s)."""

from __future__ import annotations

import pytest

from dsdr_eval.diversity_metrics.partition import darling_partition
from dsdr_eval.rundir.jsonl import read_json, read_jsonl, write_jsonl
from dsdr_eval.llm_judge.cache import JudgeCache
from dsdr_eval.llm_judge.equivalence import JudgeEquivalence, JudgePairSettings
from dsdr_eval.llm_judge.prompt import PromptBudget
from dsdr_eval.llm_judge.run import JudgeSettings, judge_equivalent, run_judge
from dsdr_eval.openai_api.client import EndpointConfig, OpenAICompatClient

pytestmark = pytest.mark.vllm

ROLLOUTS = [
    "We add 2 and 3 to get 5. The answer is \\boxed{5}.",
    "Counting on from 2: 3, 4, 5. So the sum is \\boxed{5}.",
    "Let x = 2 + 3. Since 2 + 2 = 4, x = 4 + 1 = 5, hence \\boxed{5}.",
]


def _run_dir(path, n_problems: int = 2):
    path.mkdir()
    rows = [{"benchmark": "aime24", "problem_id": f"p{p}", "sample_idx": i, "phase": "sampling",
             "problem": f"What is 2 + {p + 3}?", "completion": text.replace("3", str(p + 3)), "gold": str(p + 5),
             "correct": True, "status": "correct"}
            for p in range(n_problems) for i, text in enumerate(ROLLOUTS)]
    write_jsonl(path / "graded.jsonl", rows)
    return path


def _client(vllm_server) -> OpenAICompatClient:
    base_url, model = vllm_server
    return OpenAICompatClient(EndpointConfig(base_urls=(base_url,), model=model, timeout_s=120, max_retries=1,
                                             max_concurrency=2))


def test_judge_real_server_counts_every_problem_and_caches(vllm_server, tmp_path):
    run = _run_dir(tmp_path / "run")
    client = _client(vllm_server)
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


def test_structured_judge_gives_every_problem_a_verdict(vllm_server, tmp_path):
    budget = PromptBudget(max_rollout_chars=400, max_prompt_chars=3500)
    client = _client(vllm_server)
    plain = run_judge(_run_dir(tmp_path / "plain", 4), client, JudgeSettings(response_format="text", max_tokens=256, budget=budget),
                      progress=False)["aime24"]
    run = _run_dir(tmp_path / "structured", 4)
    block = run_judge(run, client, JudgeSettings(max_tokens=256, budget=budget), progress=False)["aime24"]
    print(f"SmolLM2 judge, 4 problems x 3 rollouts, T=0, max_tokens=256: plain text n_ok={plain['n_ok']}/"
          f"{plain['n_problems']} {plain['failed_by_reason']}; structured ({block['structured_output']['mode']}) "
          f"n_ok={block['n_ok']}/{block['n_problems']} {block['failed_by_reason']} overall={block['overall']}")
    for record in read_jsonl(run / "judge.jsonl"):
        print("  structured reply:", repr((record.get("raw_response_excerpt") or "")[:200]))
    assert block["structured_output"]["mode"] == "json_schema" and block["structured_output"]["refused"] == []
    assert block["n_ok"] == block["n_problems"] == 4
    assert all(0.0 <= block[axis] <= 10.0 for axis in ("logic", "formula", "semantic", "overall"))
    rerun = run_judge(run, client, JudgeSettings(max_tokens=256, budget=budget), progress=False)["aime24"]
    assert rerun["n_cache_hits"] == 4 and rerun["n_ok"] == 4


def test_structured_pair_decisions_are_all_decided_and_cached(vllm_server, tmp_path):
    texts = ROLLOUTS + ["Write 3 = 1 + 1 + 1 and add one at a time to 2: 3, 4, 5. \\boxed{5}"]
    plain = JudgeEquivalence(_client(vllm_server), JudgePairSettings(response_format="text",
                                                                     abort_if_first_undecided=0))
    darling_partition(texts, plain)
    judge = JudgeEquivalence(_client(vllm_server), cache=JudgeCache(tmp_path))
    labels = darling_partition(texts, judge)
    print(f"SmolLM2 pair decisions: plain text {plain.counts['undecided']}/{plain.counts['asked']} undecided; "
          f"structured {judge.counts['undecided']}/{judge.counts['asked']} undecided, labels {labels.tolist()}")
    assert judge.settings()["structured_output"]["mode"] == "json_schema"
    assert judge.counts["asked"] > 0 and judge.counts["undecided"] == 0
    again = JudgeEquivalence(_client(vllm_server), cache=JudgeCache(tmp_path))
    assert darling_partition(texts, again).tolist() == labels.tolist()
    assert again.counts["cache_hits"] == again.counts["asked"] == judge.counts["asked"]
