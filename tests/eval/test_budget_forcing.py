"""Budget forcing (issue 45 item 4, s1-style): `run --thinking-budget N` on the hf backend with a chat template
that opens `<think>`: the reasoning ends at N tokens, `</think>` and the answer cue are appended, the answer is
generated with its own budget and graded; rollouts that end on their own within N are kept as they are."""

from __future__ import annotations

import json

import pytest

from dsdr_eval.rundir.jsonl import iter_jsonl, read_json


@pytest.fixture(scope="module")
def forced_run(tmp_path_factory, smollm2_dir):
    from helpers.budget_models import build_chain_llama

    from dsdr_eval.options.commands import RunOptions
    from dsdr_eval.run.evaluation import run_evaluation

    root = tmp_path_factory.mktemp("forcing")
    model = build_chain_llama(root / "model", smollm2_dir, think_template=True)
    bench = root / "chain.jsonl"
    bench.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"Question number {w}", "answer": "7"}) + "\n"
                             for i, w in enumerate(["one", "two", "three", "four"])), encoding="utf-8")
    (root / "p.yaml").write_text("name: chain\nphases:\n  - {phase: pass1, n: 1, temperature: 0.0, top_p: 1.0}\n"
                                 "  - {phase: sampling, n: 4, temperature: 1.0, top_p: 1.0}\nmax_tokens: 64\n",
                                 encoding="utf-8")
    out = root / "run"
    run_evaluation(RunOptions(model=str(model), backend="hf", benchmarks=[str(bench)], protocol=str(root / "p.yaml"),
                              thinking_budget=6, answer_budget=40, template="plain", extraction="gsm8k",
                              out=str(out), no_diversity=True, no_progress=True), command=["t"])
    return out


def test_reasoning_is_cut_at_n_and_the_answer_generated_and_graded(forced_run):
    """Every rollout either ended on its own within N (kept as generated) or was cut at N tokens: then its
    completion is the reasoning, '</think>', the cue and a generated answer, its reasoning tokens are N, and the
    grader reads the answer after '</think>'. Mutants: no marker/cue inserted (the answer is not split off:
    graded unclosed/truncated); the answer never generated (answer_tokens 0)."""
    samples = list(iter_jsonl(forced_run / "samples.jsonl"))
    graded = {(g["phase"], g["problem_id"], g["sample_idx"]): g for g in iter_jsonl(forced_run / "graded.jsonl")}
    forced = [s for s in samples if s["budget_forcing"]["forced"]]
    natural = [s for s in samples if not s["budget_forcing"]["forced"]]
    assert forced and len(forced) + len(natural) == len(samples) == 4 * 5
    for sample in forced:
        record = sample["budget_forcing"]
        assert record["reasoning_finish"] == "length" and record["reasoning_tokens"] == 6
        assert record["inserted"] == "</think>\n\nFinal Answer: " and record["answer_tokens"] >= 1
        reasoning, answer = sample["completion"].split(record["inserted"])
        assert "</think>" not in reasoning and answer
        assert sample["n_reasoning_tokens"] == 6
        assert sample["n_completion_tokens"] == 6 + record["answer_tokens"]
        g = graded[(sample["phase"], sample["problem_id"], sample["sample_idx"])]
        assert g["reasoning_state"] == "closed"
        assert g["extracted"] is None or g["extracted"] in answer
    for sample in natural:
        assert sample["budget_forcing"]["answer_tokens"] == 0 and "</think>" not in sample["completion"]
        assert sample["finish_reason"] == "stop" and sample["n_completion_tokens"] <= 6
    assert any(graded[(s["phase"], s["problem_id"], s["sample_idx"])]["correct"] for s in forced)
    config = read_json(forced_run / "config.json")
    assert config["budget_forcing"] == {"thinking_budget": 6, "answer_budget": 40, "end_marker": "</think>",
                                        "answer_cue": "\n\nFinal Answer: "}
    metrics = read_json(forced_run / "metrics.json")
    assert metrics["provenance"]["run_config"]["budget_forcing"]["thinking_budget"] == 6


def test_chat_api_is_refused_with_one_line():
    from dsdr_eval.backends.openai import OpenAIBackend
    from dsdr_eval.errors import DsdrError
    from dsdr_eval.openai_api.client import EndpointConfig
    from dsdr_eval.run.forcing import BudgetForcing, ForcingSettings

    backend = OpenAIBackend(EndpointConfig(base_urls=("http://127.0.0.1:9/v1",), model="m", api_key_env="DSDR_NO_KEY"))
    with pytest.raises(DsdrError, match="--thinking-budget needs a backend that continues a prompt text"):
        BudgetForcing(backend, ForcingSettings(8))
    backend.close()


class _Scripted:
    """A backend that answers each request from a script keyed by its prompt's end: the reasoning part ends at
    the marker (natural), at the budget (forced), or by an EOS; the answer part returns a fixed text."""

    name, api = "hf", None

    def __init__(self):
        self.requests = []

    def batch_capacity(self):
        return 8

    def max_prompts_per_batch(self):
        return 8

    def generate(self, requests, batches, on_results):
        from dsdr_eval.backends.base import Completion, RequestResult

        for batch in batches:
            out = []
            for i in batch:
                r = requests[i]
                self.requests.append(r)
                if r.prompt.endswith("</think>") or r.prompt.endswith("Final Answer: "):
                    out.append((i, RequestResult((Completion(" 7", "stop", 3, 2, r.seed),))))
                elif "natural" in r.prompt:
                    out.append((i, RequestResult((Completion("short", "stop", 3, 4, r.seed, stopped_by="</think>"),))))
                elif "eos" in r.prompt:
                    out.append((i, RequestResult((Completion("done", "stop", 3, 2, r.seed),))))
                else:
                    out.append((i, RequestResult((Completion("long", "length", 3, r.max_tokens, r.seed),))))
            on_results(out)


def test_natural_end_continues_after_the_marker_forced_gets_the_cue_and_eos_is_complete():
    """The three ends, on a scripted backend: natural (stopped at '</think>' within N): the marker is put back
    and the answer continues with no cue; forced (N spent): marker + cue; EOS without the marker: complete, no
    answer asked. The reasoning request carries max_tokens N and '</think>' as a stop string; the answer its own
    budget and a seed of its own."""
    from dsdr_eval.backends.base import GenerationRequest
    from dsdr_eval.run.forcing import BudgetForcing, ForcingSettings

    inner = _Scripted()
    forcing = BudgetForcing(inner, ForcingSettings(16, answer_budget=5))
    requests = [GenerationRequest(f"P {kind} ", "u", 1, 0.7, 1.0, 4096, 11, stop=("\n\nQ:",))
                for kind in ("natural", "forced", "eos")]
    got = {}
    forcing.generate(requests, [[0, 1, 2]], lambda results: got.update(results))
    natural, forced, eos = (got[i].completions[0] for i in range(3))
    assert (natural.text, natural.forcing["forced"], natural.n_completion_tokens) == ("short</think> 7", False, 6)
    assert (forced.text, forced.forcing["forced"], forced.n_completion_tokens) == \
           ("long</think>\n\nFinal Answer:  7", True, 18)
    assert (eos.text, eos.forcing["answer_tokens"], eos.n_completion_tokens) == ("done", 0, 2)
    reasoning = [r for r in inner.requests if r.prompt in {q.prompt for q in requests}]
    assert {(r.max_tokens, r.stop) for r in reasoning} == {(16, ("\n\nQ:", "</think>"))}
    answers = [r for r in inner.requests if r not in reasoning]
    assert len(answers) == 2 and {r.max_tokens for r in answers} == {5} and all(r.seed != 11 for r in answers)
