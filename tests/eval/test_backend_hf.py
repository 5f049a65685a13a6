"""The transformers backend on the tiny random Llama: batching, seeding, finish reasons, counts."""

from __future__ import annotations

import pytest

from dsdr_eval.backends.base import GenerationRequest
from dsdr_eval.prompts import BUILTIN_TEMPLATES, encode_prompt


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    from dsdr_eval.backends.hf import HFBackend

    return HFBackend(str(tiny_model_dir), batch_size=8)


def _requests(backend, problems, *, n, temperature, max_tokens=6, seed=7):
    out = []
    for i, problem in enumerate(problems):
        prompt, user = backend.render(BUILTIN_TEMPLATES["qwen-boxed"], problem)
        out.append(GenerationRequest(prompt, user, n, temperature, 0.9, max_tokens, seed + i))
    return out


def test_config_records_cpu_fp32_and_chat_template(backend):
    cfg = backend.config()
    assert cfg["name"] == "hf" and cfg["device"] == "cpu" and cfg["dtype"] == "float32"
    assert cfg["version"] and backend.chat is True
    prompt, user = backend.render(BUILTIN_TEMPLATES["qwen-boxed"], "What is 1+1?")
    assert prompt.startswith("<|im_start|>") and prompt.endswith("<|im_start|>assistant\n")
    assert user in prompt


def test_sampling_shapes_counts_and_length_finish(backend):
    requests = _requests(backend, ["What is 1+1?", "A much longer problem statement: " + "x " * 30], n=3,
                         temperature=0.7)
    results = backend.generate_batch(requests)
    assert [len(r.completions) for r in results] == [3, 3]
    for request, result in zip(requests, results):
        n_prompt = len(encode_prompt(backend.tokenizer, request.prompt, chat=True))
        for c in result.completions:
            assert c.n_prompt_tokens == n_prompt  # padding is not counted
            assert 1 <= c.n_completion_tokens <= 6
            assert c.finish_reason == ("length" if c.n_completion_tokens == 6 else "stop")
    texts = [c.text for r in results for c in r.completions]
    assert len(set(texts)) > 1  # T=0.7 samples differ


def test_same_batch_seed_same_text_and_different_seed_differs(backend):
    requests = _requests(backend, ["Compute 3*4.", "Compute 5-2."], n=2, temperature=1.0, max_tokens=8)
    first = [c.text for r in backend.generate_batch(requests) for c in r.completions]
    again = [c.text for r in backend.generate_batch(requests) for c in r.completions]
    assert first == again
    other = _requests(backend, ["Compute 3*4.", "Compute 5-2."], n=2, temperature=1.0, max_tokens=8, seed=1000)
    assert [c.text for r in backend.generate_batch(other) for c in r.completions] != first


def test_prefill_once_is_token_identical_to_num_return_sequences(backend):
    requests = _requests(backend, ["Short?", "A longer problem so the batch is left-padded: " + "y " * 20],
                         n=3, temperature=0.8, max_tokens=6)
    fast = [(c.text, c.n_completion_tokens) for r in backend.generate_batch(requests) for c in r.completions]
    assert backend._prefill_once and backend.prefill_fallback_reason is None
    backend._prefill_once = False
    try:
        plain = [(c.text, c.n_completion_tokens) for r in backend.generate_batch(requests) for c in r.completions]
    finally:
        backend._prefill_once = True
    assert fast == plain and len(fast) == 6


def test_greedy_with_n_copies_one_decode(backend):
    [result] = backend.generate_batch(_requests(backend, ["What is 7*6?"], n=3, temperature=0.0, max_tokens=4))
    assert len(result.completions) == 3 and len({c.text for c in result.completions}) == 1


def test_greedy_matches_a_plain_generate_loop_and_eos_gives_stop(backend):
    import torch

    request = _requests(backend, ["What is 2+3?"], n=1, temperature=0.0, max_tokens=5)[0]
    [result] = backend.generate_batch([request])
    ids = torch.tensor([encode_prompt(backend.tokenizer, request.prompt, chat=True)])
    tokens = []
    with torch.inference_mode():
        for _ in range(5):  # a hand-written greedy loop without KV cache
            logits = backend.model(torch.cat([ids, torch.tensor([tokens], dtype=torch.long)], dim=1)).logits
            tokens.append(int(logits[0, -1].argmax()))
    completion = result.completions[0]
    assert completion.finish_reason == "length" and completion.n_completion_tokens == 5
    assert completion.text == backend.tokenizer.decode(tokens, skip_special_tokens=True)
    # make the first greedy token not seen before it an EOS: generation stops there, the EOS is
    # counted but not in the text (a random model often repeats one token, then k = 0)
    k = next(i for i in range(len(tokens)) if tokens[i] not in tokens[:i])
    saved = backend.eos_ids
    backend.eos_ids = [tokens[k]]
    try:
        [stopped] = backend.generate_batch([request])
    finally:
        backend.eos_ids = saved
    c = stopped.completions[0]
    assert c.finish_reason == "stop" and c.n_completion_tokens == k + 1
    assert c.text == backend.tokenizer.decode(tokens[:k], skip_special_tokens=True)


def test_mixed_settings_in_one_batch_are_rejected(backend):
    a = _requests(backend, ["q"], n=1, temperature=0.7)[0]
    b = _requests(backend, ["q"], n=2, temperature=0.7)[0]
    with pytest.raises(ValueError, match="one \\(n, temperature"):
        backend.generate_batch([a, b])


def test_trainer_rollouts_and_the_eval_backend_share_one_generation_loop(backend, monkeypatch):
    """dsdr_train's HFRollout (token ids + sampler log-probs) and this backend (text + finish
    reasons) run the same hf_sample: with the same seed the trainer's decoded rollouts are the
    backend's completions, token for token."""
    import torch

    from dsdr_eval.backends import hf
    from dsdr_eval.protocols import derive_seed
    from dsdr_train.rollout import HFRollout

    calls: list[str] = []
    real = hf.hf_sample

    def spy(*args, **kwargs):
        calls.append("log_probs" if kwargs.get("record_log_probs") else "text")
        return real(*args, **kwargs)

    monkeypatch.setattr(hf, "hf_sample", spy)
    requests = _requests(backend, ["What is 2+3?", "Name a prime number."], n=2, temperature=0.9, max_tokens=6)
    completions = [c for r in backend.generate_batch(requests) for c in r.completions]
    encoded = [encode_prompt(backend.tokenizer, r.prompt, chat=backend.chat) for r in requests]
    torch.manual_seed(derive_seed(0, *(r.seed for r in requests)))
    rollouts = HFRollout(backend.tokenizer, batch_size=4, record_log_probs=True).generate(
        backend.model, encoded, n=2, temperature=0.9, top_p=0.9, max_new_tokens=6, group_ids=[0, 1], problem_idx=[0, 1])
    assert calls == ["text", "log_probs"]
    assert rollouts.texts == [c.text for c in completions]
    assert [len(ids) for ids in rollouts.response_ids] == [c.n_completion_tokens for c in completions]
    assert rollouts.finish_reasons == [c.finish_reason for c in completions]
    assert [len(lp) for lp in rollouts.sampler_log_probs] == [len(ids) for ids in rollouts.response_ids]
