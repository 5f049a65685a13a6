"""lm-eval samples of chat / thinking models keep their reasoning split (issue 33).

The real file: doc 1 of tests/eval/real_files/lm-eval-gsm8k (Qwen3.5-4B through lm-eval, its response opens
with an empty ``<think>\\n\\n</think>`` block). No public lm-eval samples file with a non-empty reasoning
trace was found (searched: the code and issues corpora for logged ``resps`` holding ``<think>``; only
lmms-eval's documentation examples), so the other cases are built in lm-eval 0.4.x's writer format
(``lm_eval/evaluator.py``'s logged example, as tests/helpers/import_sources.py documents): a DeepSeek-R1
distill chat prompt that opens ``<think>``, a closed trace whose reasoning holds a wrong boxed guess, a trace
the token limit cut off after a boxed guess that lm-eval's filter took as the answer (its verdict: correct),
and a task filter that dropped the reasoning from ``filtered_resps``."""

from __future__ import annotations

import json
from pathlib import Path

from dsdr_eval.cli import main
from dsdr_eval.importers.lm_eval import model_reasoning_args

REAL = Path(__file__).resolve().parent / "real_files"
GSM8K = REAL / "lm-eval-gsm8k" / "samples_gsm8k_2026-04-03T02-02-47.394179.jsonl"
DATE = "2026-05-01T10-00-00.000000"
R1_PROMPT = "<｜begin▁of▁sentence｜><｜User｜>{problem}<｜Assistant｜><think>\n"


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _graded(run: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in (run / "graded.jsonl").read_text(encoding="utf-8").splitlines() if line]
    return {row["problem_id"]: row for row in rows}


def _write(directory: Path, *, model_args: str | None = None) -> Path:
    """Three arithmetic docs (numeric golds, boxed answers), one generation each, filter ``strict-match``."""
    docs = [("How many legs do 2 cats have?", "8", "Each cat has 4 legs, so \\boxed{8}? Let me check.\n</think>\n\n"
             "I could not finish the check.", ["8"], 1.0),  # a box in the reasoning, none in the answer
            ("What is 3 + 4?", "7", "We add 3 and 4. A first guess: \\boxed{7}. Let me verify by counting up from 3: 4,",
             ["7"], 1.0),  # cut off by max_gen_toks inside the reasoning; the filter took the guess
            ("What is 10 - 4?", "6", "Subtract: 10 - 4 = 6.\n</think>\n\nThe answer is \\boxed{6}.",
             ["The answer is \\boxed{6}."], 1.0)]  # a task filter that strips the reasoning
    rows = []
    for doc_id, (question, gold, resp, filtered, verdict) in enumerate(docs):
        rows.append({"doc_id": doc_id, "doc": {"question": question, "answer": f"#### {gold}"}, "target": gold,
                     "arguments": {"gen_args_0": {"arg_0": R1_PROMPT.format(problem=question), "arg_1": {
                         "until": ["<｜end▁of▁sentence｜>"], "do_sample": True, "temperature": 0.6, "top_p": 0.95,
                         "max_gen_toks": 32}}},
                     "resps": [[resp]], "filtered_resps": filtered, "filter": "strict-match",
                     "metrics": ["exact_match"], "doc_hash": "0" * 64, "prompt_hash": "1" * 64,
                     "target_hash": "2" * 64, "exact_match": verdict})
    directory.mkdir(parents=True, exist_ok=True)
    results: dict = {"results": {"thinking_arith": {"exact_match,strict-match": 1.0}}, "lm_eval_version": "0.4.9",
                     "git_hash": "abc1234", "model_name": "r1-distill-fixture", "date": 1777600000.0}
    if model_args is not None:
        results["config"] = {"model": "vllm", "model_args": model_args}
    (directory / f"results_{DATE}.json").write_text(json.dumps(results), encoding="utf-8")
    path = directory / f"samples_thinking_arith_{DATE}.jsonl"
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def test_thinking_traces_are_graded_on_the_answer_and_a_cut_off_trace_is_truncated(tmp_path, capsys):
    """Mutants: 'import filtered_resps as the completion' (doc 2 loses its reasoning, doc 1's guess is graded
    correct), 'drop the prompt' (doc 1 is no longer unclosed reasoning: its boxed guess is graded correct)."""
    run = tmp_path / "run"
    code, _, err = _cli(capsys, "import", _write(tmp_path / "src"), "--out", run)
    assert code == 0, err
    code, _, err = _cli(capsys, "score", run)
    assert code == 0, err
    graded = _graded(run)
    closed, cut, filtered = graded["0"], graded["1"], graded["2"]
    assert closed["status"] == "no_answer" and closed["correct"] is False and closed["reasoning_state"] == "closed"
    assert "answer_part" in closed["changed_by"]  # the whole completion's box (the gold) was in the reasoning
    assert cut["status"] == "truncated" and cut["correct"] is False and cut["reasoning_state"] == "unclosed"
    assert cut["source_correct"] is True  # lm-eval graded the guess correct: a listed disagreement
    assert filtered["reasoning_state"] == "closed" and filtered["completion"].startswith("Subtract: 10 - 4")
    assert filtered["status"] == "correct" and filtered["extracted"] == "6"
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["benchmarks"][next(iter(metrics["benchmarks"]))]["unclosed_reasoning_fraction"] == 1 / 3


def test_real_lm_eval_chat_output_keeps_its_think_block(tmp_path, capsys):
    run = tmp_path / "run"
    assert _cli(capsys, "import", GSM8K, "--out", run)[0] == 0
    assert _cli(capsys, "score", run)[0] == 0
    graded = _graded(run)
    real = next(row for row in graded.values() if "<think>" in row["completion"])
    assert real["reasoning_state"] == "closed" and real["status"] == "correct" and real["extracted"] == "3"
    start, end = real["answer_span"]
    assert real["completion"][start:end].lstrip().startswith("A robe takes 2 bolts")


def test_think_end_token_in_model_args_is_recorded_and_said(tmp_path, capsys):
    run = tmp_path / "run"
    path = _write(tmp_path / "src", model_args="pretrained=deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B,"
                                                "think_end_token=</think>,enable_thinking=True")
    code, out, err = _cli(capsys, "import", path, "--out", run)
    assert code == 0, err
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    text = json.dumps(config)
    assert "think_end_token" in text and "lm-eval issue 3382" in text
    assert model_reasoning_args({"think_end_token": 151668, "pretrained": "m"}) == {"think_end_token": 151668}
    assert model_reasoning_args("pretrained=m,dtype=bfloat16") == {}
    assert model_reasoning_args(None) == {}
