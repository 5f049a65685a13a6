"""Small result files of other tools, each in that tool's own schema (read from its public source):

- lm-evaluation-harness ``--log_samples``: ``lm_eval/evaluator.py`` (the logged example) and
  ``lm_eval/loggers/evaluation_tracker.py`` (``save_results_samples``: ``samples_<task>_<date>.jsonl``,
  ``arguments`` as ``gen_args_N``/``arg_M``, responses stringified), ``results_<date>.json``
  (``lm_eval_version``);
- Qwen2.5-Math ``evaluation/math_eval.py`` + ``evaluate.py`` (``idx``, ``question``, ``gt_cot``, ``gt``,
  data-set fields, ``code``, ``pred``, ``report``, ``score``; the file name carries seed and temperature);
- lighteval ``EvaluationTracker.save`` (``details/<model>/<date>/details_<task>_<date>.parquet``: one
  row per ``Detail``: ``doc``, ``metric``, ``model_response`` structs) and ``results/<model>/results_<date>.json``
  (``config_general.lighteval_sha``, ``model_config.generation_parameters``);
- the OpenAI Batch API (``BatchRequestOutput``: ``id``, ``custom_id``, ``response`` {``status_code``,
  ``request_id``, ``body``: a chat completion}, ``error``; the input file: ``custom_id``, ``method``,
  ``url``, ``body`` with ``messages`` and the sampling settings);
- verl ``RayPPOTrainer._dump_generations`` (``<step>.jsonl``: ``input``, ``output``, ``gts``, ``score``,
  ``step`` and the reward's extra info, e.g. ``reward``, ``acc``, ``pred``).

Problems and gold answers are the first MATH-500 problems of the shared benchmark file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LM_EVAL_DATE = "2026-11-30T09-15-02.123456"
QWEN_NAME = "test_qwen25-math-cot_-1_seed0_t0.6_s0_e-1.jsonl"


def math500(data_dir: Path, n: int = 3) -> list[dict[str, Any]]:
    with (Path(data_dir) / "math500.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for _, line in zip(range(n), fh)]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def completions(gold: str) -> list[str]:
    """Three completions: the gold boxed, a wrong number boxed, the gold as a bare final line."""
    return [f"We compute carefully. The answer is $\\boxed{{{gold}}}$.",
            "After some algebra we get $\\boxed{7919}$.",
            f"Simplifying gives {gold}, so the final answer is {gold}"]


def write_lm_eval(directory: Path, data_dir: Path, *, repeats: int = 3, filters: tuple[str, ...] = ("none",)) -> Path:
    """samples_hendrycks_math500_<date>.jsonl (+ results_<date>.json), ``repeats`` generations per doc."""
    rows = []
    for flt in filters:
        for doc_id, doc in enumerate(math500(data_dir)):
            prompt = f"Problem: {doc['problem']}\nAnswer:"
            texts = completions(doc["answer"])
            texts = (texts if doc_id != 1 else [texts[1], texts[0], texts[2]])[:repeats]  # doc 1: first one wrong
            first_answer = doc["answer"] if doc_id != 1 else "7919"  # take_first: the first generation's
            row = {"doc_id": doc_id, "doc": doc, "target": doc["answer"],
                   "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": {
                       "until": ["Problem:"], "do_sample": True, "temperature": 0.6, "top_p": 0.95,
                       "max_gen_toks": 1024}}},
                   "resps": [texts], "filtered_resps": [first_answer], "filter": flt, "metrics": ["exact_match"],
                   "doc_hash": "0" * 64, "prompt_hash": "1" * 64, "target_hash": "2" * 64,
                   "exact_match": 1.0 if doc_id != 1 else 0.0}
            rows.append(row)
    (directory / f"results_{LM_EVAL_DATE}.json").parent.mkdir(parents=True, exist_ok=True)
    (directory / f"results_{LM_EVAL_DATE}.json").write_text(json.dumps(
        {"results": {"hendrycks_math500": {"exact_match,none": 0.667}}, "lm_eval_version": "0.4.9",
         "git_hash": "abc1234", "model_name": "fixture-model", "date": 1764494102.0}), encoding="utf-8")
    return _write(directory / f"samples_hendrycks_math500_{LM_EVAL_DATE}.jsonl", rows)


def write_qwen_math(directory: Path, data_dir: Path) -> Path:
    """<data_name>/<split>_<prompt_type>_<n>_seed<S>_t<T>_s<a>_e<b>.jsonl with 3 completions per problem."""
    rows = []
    for idx, doc in enumerate(math500(data_dir)):
        code = completions(doc["answer"])
        rows.append({"idx": idx, "question": doc["problem"], "gt_cot": doc["solution"], "gt": doc["answer"],
                     "level": doc.get("level"), "type": doc.get("subject"), "code": code,
                     "pred": [doc["answer"], "7919", ""], "report": [None, None, None],
                     "score": [True, False, False]})
    return _write(directory / "math500" / QWEN_NAME, rows)


def write_verl(directory: Path, data_dir: Path, *, step: int = 40, with_acc: bool = True) -> Path:
    """<validation_data_dir>/<step>.jsonl: val_kwargs.n = 3 interleaved completions per prompt."""
    rows = []
    for doc in math500(data_dir):
        prompt = (f"<|im_start|>user\n{doc['problem']} Let's think step by step and output the final answer "
                  "within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n")
        for text, good in zip(completions(doc["answer"]), (True, False, False)):
            row = {"input": prompt, "output": text, "gts": doc["answer"], "score": 1.0 if good else -1.0,
                   "step": step, "reward": 1.0 if good else -1.0}
            if with_acc:
                row.update(acc=good, pred=doc["answer"] if good else "7919")
            rows.append(row)
    return _write(directory / f"{step}.jsonl", rows)


def write_lighteval(output_dir: Path, data_dir: Path, *, num_samples: int = 1) -> Path:
    """details/<org>/<model>/<date>/details_lighteval|math_500|0_<date>.parquet + the results file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for doc in math500(data_dir):
        texts = completions(doc["answer"])[:num_samples] if doc["id"] != math500(data_dir)[1]["id"] else \
            completions(doc["answer"])[1:1 + num_samples]
        good = 0.0 if doc["id"] == math500(data_dir)[1]["id"] else 1.0
        rows.append({
            "doc": {"query": f"Solve: {doc['problem']}", "choices": [doc["answer"]], "gold_index": 0,
                    "instruction": None, "specific": None, "unconditioned_query": None,
                    "original_query": doc["problem"], "id": str(len(rows)), "task_name": "lighteval|math_500|0",
                    "fewshot_samples": [], "generation_size": 2048, "stop_sequences": [], "use_logits": False,
                    "num_samples": num_samples},
            "metric": {"extractive_match": good},
            "model_response": {"input": f"<|user|>Solve: {doc['problem']}", "text": texts,
                               "text_post_processed": None, "input_tokens": [1, 2], "output_tokens": [[3]]},
        })
    date = LM_EVAL_DATE
    details = output_dir / "details" / "org" / "model" / date
    details.mkdir(parents=True)
    path = details / f"details_lighteval|math_500|0_{date}.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    results = output_dir / "results" / "org" / "model"
    results.mkdir(parents=True)
    (results / f"results_{date}.json").write_text(json.dumps({"config_general": {
        "lighteval_sha": "0a1b2c3", "model_name": "org/model", "model_config": {"generation_parameters": {
            "temperature": 0.6, "top_p": 0.95, "max_new_tokens": None, "seed": 7, "top_k": None}}},
        "results": {}, "versions": {}}), encoding="utf-8")
    return path


def write_openai_batch(directory: Path, data_dir: Path) -> tuple[Path, Path]:
    """batch_input.jsonl (n = 2 per request) and batch_output.jsonl (one request failed)."""
    inputs, outputs = [], []
    for i, doc in enumerate(math500(data_dir) + [math500(data_dir)[0]]):  # problem 0 asked twice
        custom_id = f"req-{i}"
        inputs.append({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "gpt-fixture", "messages": [
                           {"role": "system", "content": "You are a careful mathematician."},
                           {"role": "user", "content": f"{doc['problem']}\nPut the final answer in \\boxed{{}}."}],
                           "temperature": 0.7, "top_p": 0.9, "max_completion_tokens": 512, "n": 2, "seed": 3}})
        if i == 2:
            outputs.append({"id": f"batch_req_{i}", "custom_id": custom_id, "response": None,
                            "error": {"code": "server_error", "message": "internal"}})
            continue
        texts = completions(doc["answer"])[:2]
        outputs.append({"id": f"batch_req_{i}", "custom_id": custom_id, "error": None, "response": {
            "status_code": 200, "request_id": f"r{i}", "body": {
                "id": f"chatcmpl-{i}", "object": "chat.completion", "created": 1764494102, "model": "gpt-fixture-0613",
                "choices": [{"index": j, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                            for j, t in enumerate(texts)],
                "usage": {"prompt_tokens": 50, "completion_tokens": 40, "total_tokens": 90}}}})
    return _write(directory / "batch_input.jsonl", inputs), _write(directory / "batch_output.jsonl", outputs)
