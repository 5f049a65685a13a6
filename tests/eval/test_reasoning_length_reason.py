"""Mean reasoning tokens of inline `<think>` samples without token counts (issue 46 item 4): `score`
counts them with the model's tokenizer when config.json names a local model that has one, and says
why the figure is '-' when no tokenizer is known."""

from __future__ import annotations

import json

from dsdr_eval.cli import main

THOUGHTS = ["<think>two plus two, carefully: four.</think> The answer is \\boxed{4}.",
            "<think>I think it is five</think>\\boxed{5}",
            "<think>never closes, and the budget ran out"]


def _samples(path, *, counts=False):
    rows = [{"benchmark": "toy", "problem_id": "p1", "sample_idx": i, "phase": "sampling", "gold": "4",
             "completion": text, **({"n_completion_tokens": 30} if counts else {})}
            for i, text in enumerate(THOUGHTS)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _score(target, *extra):
    return main(["score", str(target), "--workers", "1", "--bootstrap", "0", "--no-progress", *extra])


def test_an_unknown_reasoning_length_says_why(tmp_path, capsys):
    """Mutant 'reasoning_summary leaves the reason out': no line, no field."""
    _samples(tmp_path / "s.jsonl")
    assert _score(tmp_path / "s.jsonl", "--out", str(tmp_path / "out")) == 0
    entry = json.loads((tmp_path / "out" / "metrics.json").read_text())["benchmarks"]["toy"]
    assert entry["mean_reasoning_tokens"] is None
    assert entry["reasoning_tokens_unknown"].startswith("3 of 3 samples reason without a recorded reasoning token count")
    out = capsys.readouterr().out
    assert "toy: tokens '-': 3 of 3 samples reason without" in out


def test_the_models_tokenizer_counts_them_when_config_names_it(tmp_path, tiny_model_dir):
    """An independent count: the tokenizer applied here to the text before each answer (the whole
    completion when the reasoning never closed). Mutant '_counted counts the whole completion': the
    means differ."""
    from transformers import AutoTokenizer

    run = tmp_path / "run"
    run.mkdir()
    _samples(run / "samples.jsonl", counts=True)
    (run / "config.json").write_text(json.dumps({"kind": "eval", "model": {
        "spec": "tiny", "path": str(tiny_model_dir), "is_local": True, "fingerprint": None, "revision": None}}))
    assert _score(run) == 0
    metrics = json.loads((run / "metrics.json").read_text())
    entry = metrics["benchmarks"]["toy"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    reasoning = [count(text[:text.index("</think>") + len("</think>")]) if "</think>" in text else count(text)
                 for text in THOUGHTS]
    assert entry["mean_reasoning_tokens"] == sum(reasoning) / 3
    assert entry["mean_answer_tokens"] == sum(30 - n for n in reasoning) / 3
    assert "reasoning_tokens_unknown" not in entry
    assert metrics["provenance"]["grading"]["reasoning_tokens_counted_with"] == {"tokenizer": str(tiny_model_dir),
                                                                                 "n_samples": 3}
