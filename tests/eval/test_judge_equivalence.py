"""``--partition judge``: an LLM judge as DARLING's pairwise equivalence (ALGORITHMS.md §4),
against the fault-injecting OpenAI-compatible server (tests/helpers/fault_server.py).

The scripted judge reads a tag ``k=<int>`` from each of the two solutions it is shown and answers
``{"equivalent": true}`` iff |k_a - k_b| == 1: a relation that is NOT transitive, so the expected
partition is its union-find closure (computed here independently, by graph search)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers.fault_server import FaultServer, response_format_type

from dsdr_eval.diversity_metrics.partition import darling_partition
from dsdr_eval.diversity_metrics.partition_methods import check_partition_spec, make_equivalence
from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.jsonl import read_json, read_jsonl, write_json, write_jsonl
from dsdr_eval.llm_judge.cache import JudgeCache
from dsdr_eval.llm_judge.equivalence import UNPARSEABLE, JudgeEquivalence, JudgePairSettings
from dsdr_eval.openai_api.client import EndpointConfig, OpenAICompatClient

TAG = re.compile(r"\bk=(\d+)\b")
GARBAGE_TAG = 99  # the judge answers nonsense for any pair that shows this solution


def _tags(body: dict) -> tuple[int, int]:
    user = body["messages"][-1]["content"]
    found = [int(k) for k in TAG.findall(user)]
    assert len(found) == 2, user  # exactly the two solutions, A then B
    return found[0], found[1]


def scripted_judge(body: dict) -> str:
    a, b = _tags(body)
    if GARBAGE_TAG in (a, b):
        return "They look quite similar to me, honestly. {not json"
    return json.dumps({"equivalent": abs(a - b) == 1})


def expected_closure(tags: list[int], undecided: set[frozenset[int]] = frozenset()) -> list[int]:
    """Connected components of |a-b| == 1 (minus undecided pairs / garbage), labelled by first
    appearance: the partition a correct union-find over the scripted judge must produce."""
    def edge(i: int, j: int) -> bool:
        a, b = tags[i], tags[j]
        return (abs(a - b) == 1 and GARBAGE_TAG not in (a, b)
                and frozenset((i, j)) not in undecided)

    labels = [-1] * len(tags)
    next_label = 0
    for start in range(len(tags)):
        if labels[start] != -1:
            continue
        stack = [start]
        labels[start] = next_label
        while stack:
            i = stack.pop()
            for j in range(len(tags)):
                if labels[j] == -1 and edge(i, j):
                    labels[j] = next_label
                    stack.append(j)
        next_label += 1
    return labels


def _texts(tags: list[int]) -> list[str]:
    return [f"Method k={k}: we compute $x_{{{k}}} = {k} + 1$ and conclude \\boxed{{{k + 1}}}." for k in tags]


def _judge(server: FaultServer, *, concurrency: int = 4, max_retries: int = 0, cache: JudgeCache | None = None,
           **settings) -> JudgeEquivalence:
    client = OpenAICompatClient(EndpointConfig(base_urls=(server.base_url,), model=server.model,
                                               max_concurrency=concurrency, max_retries=max_retries,
                                               timeout_s=5.0, backoff_base_s=0.001), sleep=lambda s: None)
    return JudgeEquivalence(client, JudgePairSettings(**settings), cache=cache)


def _asked_pairs(server: FaultServer) -> list[tuple[int, int]]:
    return [_tags(r.body) for r in server.completion_requests()]


# ----------------------------------------------------------------------------- group level

def test_partition_is_the_union_find_closure_of_the_judges_pair_decisions() -> None:
    tags = [2, 10, 1, 20, 11, 3, 30]   # chains 1-2-3 and 10-11; 20 and 30 alone
    with FaultServer(default="ok", reply=scripted_judge) as server:
        judge = _judge(server)
        labels = darling_partition(_texts(tags), judge)
        asked = _asked_pairs(server)
    assert labels.tolist() == expected_closure(tags) == [0, 1, 0, 2, 1, 0, 3]
    # 1~3 follows by transitivity: 2 joined 1 and 3 in the first row, so (1, 3) is never asked.
    assert (1, 3) not in asked and (2, 1) in asked and (2, 3) in asked and len(asked) == 20
    assert len(asked) == len(set(asked))          # no pair asked twice
    assert all(tags.index(a) < tags.index(b) for a, b in asked)  # (earlier, later) rollout
    counts = judge.settings()["pair_decisions"]
    assert counts["asked"] == len(asked) and counts["undecided"] == 0
    assert counts["equivalent"] == sum(abs(a - b) == 1 for a, b in asked) == 3
    assert counts["not_equivalent"] == len(asked) - 3
    body = server.completion_requests()[0].body
    assert body["model"] == server.model and body["temperature"] == 0.0 and body["max_tokens"] == 32


def test_unparseable_replies_are_counted_and_never_merge() -> None:
    tags = [1, 2, GARBAGE_TAG, 3, 98, 100]   # 98 and 100 would join 99 if its replies were read as "yes"
    with FaultServer(default="ok", reply=scripted_judge) as server:
        judge = _judge(server)
        labels = darling_partition(_texts(tags), judge)
        asked = _asked_pairs(server)
    assert labels.tolist() == expected_closure(tags) == [0, 0, 1, 0, 2, 3]
    counts = judge.counts
    n_garbage = sum(GARBAGE_TAG in pair for pair in asked)
    assert n_garbage == 5  # 99 is never joined, so every pair with it is asked
    assert counts["undecided"] == n_garbage and counts["undecided_by_reason"] == {UNPARSEABLE: n_garbage}
    assert counts["asked"] == len(asked) and counts["first_error"].startswith(UNPARSEABLE)
    assert counts["equivalent"] + counts["not_equivalent"] + counts["undecided"] == counts["asked"]


@pytest.mark.parametrize("reply", [
    '{"equivalent": "yes"}', '{"equivalent": null}', '{"equivalent": 1}', "", "[true]", "{" * 5000,
    '{"same": true}', "```json\n{\"equivalent\": tru\n```",
])
def test_hostile_reply_bodies_are_undecided(reply: str) -> None:
    with FaultServer(default="ok", reply=reply) as server:
        judge = _judge(server, abort_if_first_undecided=0)
        labels = darling_partition(_texts([1, 2, 3]), judge)
    assert labels.tolist() == [0, 1, 2]
    assert judge.counts["undecided"] == judge.counts["asked"] == 3


def test_http_failures_are_counted_by_reason_and_treated_as_not_merged() -> None:
    # One worker: requests reach the server in request order, so the script hits pairs (0,1), (0,2), (0,3).
    tags = [1, 2, 3, 10, 11]
    with FaultServer(script=["500", "garbage", "429"], default="ok", reply=scripted_judge) as server:
        judge = _judge(server, concurrency=1, max_retries=0)
        labels = darling_partition(_texts(tags), judge)
        asked = _asked_pairs(server)
    failed = {frozenset((0, 1)), frozenset((0, 2)), frozenset((0, 3))}
    assert asked[:3] == [(1, 2), (1, 3), (1, 10)]
    assert labels.tolist() == expected_closure(tags, failed) == [0, 1, 1, 2, 2]
    assert judge.counts["undecided_by_reason"] == {"http_error:http_500": 1, "http_error:invalid_response": 1,
                                                   "http_error:http_429": 1}
    assert judge.counts["undecided"] == 3 and judge.counts["asked"] == len(asked)


def test_retries_recover_a_decision() -> None:
    with FaultServer(script=["503", "garbage_json"], default="ok", reply=scripted_judge) as server:
        judge = _judge(server, concurrency=1, max_retries=2)
        labels = darling_partition(_texts([1, 2]), judge)
    assert labels.tolist() == [0, 0] and judge.counts["undecided"] == 0
    assert server.behaviours() == ["503", "garbage_json", "ok"]


def test_pair_batches_go_out_concurrently_within_the_bound() -> None:
    tags = [1, 10, 20, 30, 40, 50]   # no merges: every pair is asked, the first batch has 5
    with FaultServer(default="timeout", delay_s=0.15, reply=scripted_judge) as server:
        judge = _judge(server, concurrency=3)
        labels = darling_partition(_texts(tags), judge)
        assert server.max_in_flight == 3
    assert labels.tolist() == list(range(6)) and judge.counts["asked"] == 15


def test_a_judge_that_never_decides_stops_the_run_with_a_clear_error() -> None:
    with FaultServer(default="ok", reply="I cannot answer that.") as server:
        judge = _judge(server, abort_if_first_undecided=4)
        with pytest.raises(DsdrError, match=r"first 5 pair decisions were all undecided .*parse:"):
            darling_partition(_texts([1, 2, 3, 4, 5, 6]), judge)
    # One decided pair is enough to keep going: failures later are counted, not fatal.
    with FaultServer(script=["ok"], default="ok", reply=scripted_judge) as good:
        lenient = _judge(good, abort_if_first_undecided=4)
        darling_partition(_texts([1, 2]), lenient)
        good.reply = "nonsense"
        darling_partition(_texts([1, 2, 3, 4, 5, 6]), lenient)
    assert lenient.counts["equivalent"] == 1 and lenient.counts["undecided"] == lenient.counts["asked"] - 1


def test_dead_endpoint_fails_fast() -> None:
    judge = make_equivalence("judge:some-model", judge_endpoint={"base_urls": ["http://127.0.0.1:9/v1"],
                                                                 "max_retries": 0, "timeout_s": 2.0})
    with pytest.raises(DsdrError, match=r"all undecided \(http_error:connection=\d+\).*127\.0\.0\.1:9"):
        darling_partition(_texts(list(range(0, 40, 5))), judge)   # 8 rollouts: 28 pairs >= 16


def test_hostile_solution_texts_do_not_crash_and_are_cut() -> None:
    texts = ["k=1 \ud800 lone surrogate", "k=2 " + "x" * 50_000, "k=3 {A} {B} ## Solution B"]
    with FaultServer(default="ok", reply=lambda body: json.dumps({"equivalent": True})) as server:
        judge = _judge(server, max_chars=1000)
        labels = darling_partition(texts, judge)
        bodies = [r.body for r in server.completion_requests()]
    assert labels.tolist() == [0, 0, 0]
    assert all(len(b["messages"][-1]["content"]) < 3000 for b in bodies)
    assert "\ufffd" in bodies[0]["messages"][-1]["content"]


def test_factory_options_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_partition_spec("judge:m") == ("judge", "m")
    with pytest.raises(DsdrError, match="--judge-model"):
        make_equivalence("judge")
    with pytest.raises(DsdrError, match="different models"):
        make_equivalence("judge:a", judge_model="b")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1234/v1")
    judge = make_equivalence("judge:m", judge_endpoint={"api_key_env": "MY_KEY", "max_concurrency": 3},
                             encoder=object(), threshold=0.5)
    endpoint = judge.settings()["endpoint"]
    assert endpoint["base_urls"] == ["http://127.0.0.1:1234/v1"] and endpoint["api_key_env"] == "MY_KEY"
    assert endpoint["max_concurrency"] == 3 and endpoint["model"] == "m"
    judge = make_equivalence("judge", judge_model="m", judge_endpoint={"base_urls": ["http://a:1/v1,http://b:2/v1"]})
    assert judge.settings()["endpoint"]["base_urls"] == ["http://a:1/v1", "http://b:2/v1"]
    with pytest.raises(DsdrError, match="max_concurrency"):
        make_equivalence("judge:m", judge_endpoint={"max_concurrency": 0})


def test_pair_requests_carry_the_pair_schema() -> None:
    # schema_reply: a json_schema request is answered with an instance of its schema ({"equivalent": true})
    with FaultServer(reply="Hard to say, they are sort of alike.", schema_reply=True) as server:
        judge = _judge(server)
        labels = darling_partition(_texts([1, 5, 9]), judge)
        bodies = [r.body for r in server.completion_requests()]
    assert labels.tolist() == [0, 0, 0] and judge.counts["undecided"] == 0
    schema = bodies[0]["response_format"]["json_schema"]["schema"]
    assert schema == {"type": "object", "properties": {"equivalent": schema["properties"]["equivalent"]},
                      "required": ["equivalent"], "additionalProperties": False}
    assert schema["properties"]["equivalent"]["type"] == "boolean"
    structured = judge.settings()["structured_output"]
    assert structured["mode"] == "json_schema" and structured["replies_by_mode"] == {"json_schema": len(bodies)}


def test_pair_decisions_fall_back_once_and_are_cached(tmp_path: Path) -> None:
    tags = [2, 10, 1, 20, 11, 3, 30]
    with FaultServer(reply=scripted_judge, accept_formats=("json_object", "text")) as server:
        first = _judge(server, cache=JudgeCache(tmp_path))
        labels = darling_partition(_texts(tags), first)
        types = [response_format_type(r.body) for r in server.completion_requests()]
        # a rerun (a fresh judge on the same cache) asks nothing and decides the same
        again = _judge(server, cache=JudgeCache(tmp_path))
        assert darling_partition(_texts(tags), again).tolist() == labels.tolist() == expected_closure(tags)
        assert len(server.completion_requests()) == len(types)
    assert types == ["json_schema"] + ["json_object"] * first.counts["asked"]  # refused once, then json_object
    structured = first.settings()["structured_output"]
    assert structured["mode"] == "json_object" and [r["mode"] for r in structured["refused"]] == ["json_schema"]
    assert first.counts["cache_hits"] == 0 and again.counts["cache_hits"] == again.counts["asked"] == first.counts["asked"]
    assert again.settings()["structured_output"]["detected_by"] == "cached reply"
    assert first.settings()["cache"] == str(tmp_path / "judge_cache.jsonl")
    # the mode is part of the key: asking in plain text is new
    with FaultServer(reply=scripted_judge) as server:
        text_judge = _judge(server, cache=JudgeCache(tmp_path), response_format="text")
        darling_partition(_texts(tags), text_judge)
        assert len(server.completion_requests()) == first.counts["asked"]
        assert all("response_format" not in r.body for r in server.completion_requests())


# ----------------------------------------------------------------------------- CLI on a run dir

# problem -> (gold, [(tag, boxed answer)]) in sample_idx order
RUN_PROBLEMS = {
    "p1": ("4", [(1, "4"), (10, "5"), (GARBAGE_TAG, "4"), (2, "4"), (11, "5"), (3, "4")]),
    "p2": ("7", [(20, "7"), (21, "8"), (22, "7"), (23, "8"), (30, "7"), (40, "8")]),
}


def _scored_run_dir(tmp_path: Path) -> Path:
    from dsdr_eval.scoring.score import score_run_dir

    rows = []
    for problem_id, (gold, rollouts) in RUN_PROBLEMS.items():
        rows.append({"benchmark": "toy", "problem_id": problem_id, "sample_idx": 0, "phase": "pass1",
                     "problem": "Q", "gold": gold, "completion": f"k=0 \\boxed{{{gold}}}"})
        for idx, (tag, answer) in enumerate(rollouts):
            rows.append({"benchmark": "toy", "problem_id": problem_id, "sample_idx": idx, "phase": "sampling",
                         "problem": "Q", "gold": gold,
                         "completion": f"Method k={tag}: a few steps, so the answer is \\boxed{{{answer}}}."})
    tmp_path.mkdir(parents=True, exist_ok=True)
    write_jsonl(tmp_path / "samples.jsonl", rows)
    score_run_dir(tmp_path, workers=1, progress=False, bootstrap=10)
    write_json(tmp_path / "config.json", {"kind": "eval", "label": "judge-partition-test"})
    return tmp_path


def _all_output_files(run_dir: Path) -> str:
    return "".join(p.read_text(encoding="utf-8", errors="replace") for p in run_dir.rglob("*") if p.is_file())


@pytest.mark.slow  # the judge partition loads MiniLM (caught by DSDR_CHECK_FAST=1)
def test_cli_partition_judge_on_a_scored_run(tmp_path: Path, capsys: pytest.CaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from dsdr_eval.cli import main

    secret = "sk-test-" + "7f3a" * 8
    monkeypatch.setenv("DSDR_TEST_JUDGE_KEY", secret)
    run_dir = _scored_run_dir(tmp_path / "run")
    with FaultServer(default="ok", reply=scripted_judge) as server:
        code = main(["diversity", str(run_dir), "--no-progress", "--partition", "judge",
                     "--judge-model", server.model, "--judge-base-url", server.base_url,
                     "--judge-api-key-env", "DSDR_TEST_JUDGE_KEY", "--concurrency", "3"])
        requests = server.completion_requests()
    out = capsys.readouterr()
    assert code == 0, out.err
    assert all(r.headers["authorization"] == f"Bearer {secret}" for r in requests)
    assert server.max_in_flight <= 3

    diversity = read_json(run_dir / "metrics.json")["benchmarks"]["toy"]["diversity"]
    partition = diversity["settings"]["partition"]
    counts = partition["pair_decisions"]
    n_garbage = sum(GARBAGE_TAG in _tags(r.body) for r in requests)
    assert partition["method"] == "judge" and partition["endpoint"]["api_key_env"] == "DSDR_TEST_JUDGE_KEY"
    # The correct-only subgroup is answered from the cache: one request per counted decision.
    assert counts["asked"] == len(requests) and counts["undecided"] == n_garbage > 0
    assert counts["undecided_by_reason"] == {UNPARSEABLE: n_garbage}
    assert f"judge pair decisions: {len(requests)} asked" in out.err and f"{n_garbage} undecided" in out.err
    assert read_json(run_dir / "config.json")["diversity"]["partition"]["pair_decisions"] == counts

    per_problem = {r["problem_id"]: r for r in read_jsonl(run_dir / "diversity_per_problem.jsonl")}
    per_sample = [r for r in read_jsonl(run_dir / "diversity_per_sample.jsonl")]
    for problem_id, (gold, rollouts) in RUN_PROBLEMS.items():
        tags = [tag for tag, _ in rollouts]
        correct = [answer == gold for _, answer in rollouts]
        expected_all = expected_closure(tags)
        expected_correct = expected_closure([t for t, c in zip(tags, correct) if c])
        samples = sorted((r for r in per_sample if r["problem_id"] == problem_id), key=lambda r: r["sample_idx"])
        assert [r["class_id"] for r in samples] == expected_all
        assert [r["class_id_correct"] for r in samples if r["correct"]] == expected_correct
        assert per_problem[problem_id]["all"]["n_classes"] == max(expected_all) + 1
        assert per_problem[problem_id]["correct"]["n_classes"] == max(expected_correct) + 1
        sizes = np.bincount(expected_all)[expected_all]
        assert [r["div"] for r in samples] == pytest.approx(np.maximum((6 - sizes) / 5, 0.1).tolist())
    # p2: 20~21~22~23 is one class of all rollouts, but the correct ones (20, 22, 30) are 3 classes.
    assert per_problem["p2"]["all"]["n_classes"] == 3 and per_problem["p2"]["correct"]["n_classes"] == 3

    assert secret not in _all_output_files(run_dir) and secret not in out.out + out.err


@pytest.mark.slow  # the judge partition loads MiniLM (caught by DSDR_CHECK_FAST=1)
def test_cli_judge_errors_exit_2_before_anything_is_written(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from dsdr_eval.cli import main

    run_dir = _scored_run_dir(tmp_path / "run")
    before = (run_dir / "metrics.json").read_text()
    assert main(["diversity", str(run_dir), "--partition", "judge"]) == 2
    assert "--judge-model" in capsys.readouterr().err
    assert main(["diversity", str(run_dir), "--judge-model", "m"]) == 2
    assert "--judge-model only applies to --partition judge" in capsys.readouterr().err
    with FaultServer(default="ok", reply="no idea") as server:   # 30 pairs, all unparseable -> abort at 16+
        code = main(["diversity", str(run_dir), "--no-progress", "--partition", f"judge:{server.model}",
                     "--judge-base-url", server.base_url])
    err = capsys.readouterr().err
    assert code == 2 and "pair decisions were all undecided" in err and "Traceback" not in err
    assert (run_dir / "metrics.json").read_text() == before
    assert not (run_dir / "diversity_per_problem.jsonl").exists()


@pytest.mark.slow  # the judge partition loads MiniLM (caught by DSDR_CHECK_FAST=1)
def test_cli_partition_judge_rerun_asks_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from dsdr_eval.cli import main

    run_dir = _scored_run_dir(tmp_path / "run")
    argv = ["diversity", str(run_dir), "--no-progress", "--partition", "judge", "--backoff-base", "0"]
    with FaultServer(default="ok", reply=scripted_judge, accept_formats=("json_object", "text")) as server:
        assert main([*argv, "--judge-model", server.model, "--judge-base-url", server.base_url]) == 0
        n_requests = len(server.completion_requests())
        first = read_json(run_dir / "metrics.json")["benchmarks"]["toy"]["diversity"]
        classes = [r["class_id"] for r in read_jsonl(run_dir / "diversity_per_sample.jsonl")]
        assert main([*argv, "--judge-model", server.model, "--judge-base-url", server.base_url]) == 0
        assert len(server.completion_requests()) == n_requests
    capsys.readouterr()
    rerun = read_json(run_dir / "metrics.json")["benchmarks"]["toy"]["diversity"]
    counts = rerun["settings"]["partition"]["pair_decisions"]
    assert counts["cache_hits"] == counts["asked"] == first["settings"]["partition"]["pair_decisions"]["asked"]
    assert rerun["settings"]["partition"]["structured_output"]["mode"] == "json_object"
    assert read_json(run_dir / "config.json")["diversity"]["partition"]["structured_output"]["mode"] == "json_object"
    assert (run_dir / "judge_cache.jsonl").exists()
    assert [r["class_id"] for r in read_jsonl(run_dir / "diversity_per_sample.jsonl")] == classes
