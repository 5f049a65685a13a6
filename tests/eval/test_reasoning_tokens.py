"""Inline reasoning token counts of the local engines (issue 33): a hf / vllm completion that reasons
inline (``<think>...</think>``, also opened by the chat template in the prompt) records how many of its
generated tokens are reasoning, so metrics' mean reasoning / answer tokens are known for local runs too.
The reference below scans the prefixes linearly (the code searches them by bisection)."""

from __future__ import annotations

import pytest

from dsdr_eval.backends.base import reasoning_token_count


def _piece_decoder(pieces: list[str]):
    return lambda ids: "".join(pieces[i] for i in ids)


def _reference(pieces: list[str], reasoning_end: int) -> int:
    """Independent: the first token whose piece ends at or after character ``reasoning_end``, scanning."""
    length = 0
    for count, piece in enumerate(pieces, start=1):
        length += len(piece)
        if length >= reasoning_end:
            return count
    return len(pieces)


@pytest.mark.parametrize("pieces, prompt, expected", [
    # closed: the tokens through the close tag (hand-counted), whatever the tags' tokenization
    (["<think>", "a", " b", "</think>", " so", " \\boxed{1}"], None, 4),
    (["<th", "ink>", "x", "</", "think", ">\n", "The", " answer"], None, 6),
    # the template opened <think> in the prompt: reasoning from the first generated token
    (["x", " y", "</think>", "z"], "Q?<|im_start|>assistant\n<think>\n", 3),
    # unclosed (the budget ran out): every generated token reasons ...
    (["<think>", "x", " y", " \\boxed{7}?"], None, 4),
    (["x", " y", " \\boxed{7}?"], "Q <think>\n", 3),
    # ... but text before an opening tag is not reasoning
    (["Sure.", " ", "<think>", "x"], None, 2),
    # an EOS that decodes to "" after the answer is the answer's
    (["<think>", "r", "</think>", "4", ""], None, 3),
])
def test_inline_reasoning_tokens(pieces, prompt, expected):
    """Mutants: 'count the whole completion' (every closed case fails), 'ignore the prompt' (the unclosed
    prompt-opened case gives None)."""
    count = reasoning_token_count("".join(pieces), range(len(pieces)), _piece_decoder(pieces), "auto", prompt)
    assert count == expected


def test_reference_agrees_on_closed_traces():
    pieces = ["<think>", "I", " think", " 2", "+", "2", "=", "4", "</th", "ink>", "\n", "\\boxed{4}"]
    text = "".join(pieces)
    end = text.index("</think>") + len("</think>")
    assert reasoning_token_count(text, range(len(pieces)), _piece_decoder(pieces), "think", None) == \
        _reference(pieces, end) == 10


def test_no_reasoning_or_format_none_is_none():
    pieces = ["The", " answer", " is", " \\boxed{3}"]
    assert reasoning_token_count("".join(pieces), range(4), _piece_decoder(pieces), "auto", None) is None
    closed = ["<think>", "r", "</think>", "4"]
    assert reasoning_token_count("".join(closed), range(4), _piece_decoder(closed), "none", None) is None
    # a custom end marker counts as the run's format says
    custom = ["plan", " plan", "FINAL:", " 4"]
    assert reasoning_token_count("".join(custom), range(4), _piece_decoder(custom), "end:FINAL:", None) == 3


def test_real_tokenizer_ids(smollm2_dir):
    """The SmolLM2 tokenizer's own ids of a closed trace (byte-level BPE: a tag is several tokens)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir))
    text = "<think>\nLet me add: 2+3=5, surely.</think>\nThe answer is \\boxed{5}."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = [tokenizer.decode(ids[:k + 1]) [len(tokenizer.decode(ids[:k])):] for k in range(len(ids))]
    assert "".join(pieces) == text
    decode = lambda part: tokenizer.decode(list(part), skip_special_tokens=True)  # noqa: E731
    expected = _reference(pieces, text.index("</think>") + len("</think>"))
    assert reasoning_token_count(text, ids, decode, "auto", None) == expected
    assert 10 < expected < len(ids) - 5


def test_hf_run_records_reasoning_tokens_for_a_template_opened_think(tmp_path, tiny_model_dir, data_dir):
    """A raw prompt ending in an opened <think>: the tiny random model never closes it, so every sample is
    truncated/unclosed and all its generated content tokens are reasoning; metrics' mean reasoning tokens
    is their mean (not missing). Mutant 'HFBackend leaves n_reasoning_tokens None': every assertion fails."""
    from dsdr_eval.options.commands import RunOptions
    from dsdr_eval.run.evaluation import run_evaluation
    from dsdr_eval.rundir.jsonl import iter_jsonl, read_json

    template = tmp_path / "think.txt"
    template.write_text("{problem}\n<think>\n", encoding="utf-8")
    out = tmp_path / "run"
    run_evaluation(RunOptions(model=str(tiny_model_dir), backend="hf", benchmarks=["math500"], limit=1,
                              protocol="quick", n=2, max_tokens=8, template=str(template), prompt_mode="raw",
                              data_dir=str(data_dir), out=str(out), no_diversity=True, no_progress=True),
                   command=["t"])
    samples = list(iter_jsonl(out / "samples.jsonl"))
    graded = list(iter_jsonl(out / "graded.jsonl"))
    assert len(samples) == 3
    for sample in samples:
        content = sample["n_completion_tokens"] - (sample["finish_reason"] == "stop")  # the EOS is not text
        assert sample["n_reasoning_tokens"] == content
    assert {g["reasoning_state"] for g in graded} == {"unclosed"} and not any(g["correct"] for g in graded)
    block = read_json(out / "metrics.json")["benchmarks"]["math500"]
    assert block["mean_reasoning_tokens"] == pytest.approx(sum(s["n_reasoning_tokens"] for s in samples) / 3)


def test_a_long_trace_decodes_about_its_answer_not_its_reasoning():
    """A 100k-token closed trace with a 1-token answer: the search decodes a few short suffixes. Mutant 'bisect
    over prefixes' (decode ids[:k]): about 17 decodes of ~50k ids each, far over the bound."""
    pieces = ["<think>", *["r"] * 100_000, "</think>", "4"]
    decoded = []

    def decode(ids):
        decoded.append(len(ids))
        return "".join(pieces[i] for i in ids)

    text = "".join(pieces)
    assert reasoning_token_count(text, range(len(pieces)), decode, "auto", None) == len(pieces) - 1
    assert sum(decoded) <= 16
    # unclosed, 2 MB: every token reasons, nothing decoded
    decoded.clear()
    long_pieces = ["x" * 1000] * 2000
    assert reasoning_token_count("".join(long_pieces), range(2000), decode, "think", None) == 2000
    assert decoded == []


def test_vllm_counts_the_generated_ids_without_the_stopping_eos():
    """vLLM's token_ids end with the EOS that stopped them; the hf backend counts without it: so does vllm."""
    from types import SimpleNamespace

    from dsdr_eval.backends.vllm import content_ids

    assert content_ids(SimpleNamespace(token_ids=[5, 6, 2], finish_reason="stop"), (2,)) == [5, 6]
    assert content_ids(SimpleNamespace(token_ids=[5, 2], finish_reason="length"), (2,)) == [5, 2]
    assert content_ids(SimpleNamespace(token_ids=[5, 6], finish_reason="stop"), (2,)) == [5, 6]
