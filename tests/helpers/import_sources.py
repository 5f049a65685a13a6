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


# ----------------------------------------------------------------------------- real-file cases (issue 21)
# Each mirrors a case hit on a real output file; the layout is the tool's own writer's:
# - lm-eval 0.4.x gsm8k (``lm_eval/tasks/gsm8k/gsm8k.yaml``: doc_to_target "{{answer}}" is the whole
#   rationale ending "#### N"; filters strict-match and flexible-extract; ``exact_match``) as written by
#   ``EvaluationTracker.save_results_samples`` (arguments as gen_args_0/arg_0/arg_1, target str());
# - lm-eval 0.4.0-0.4.2 (``evaluator.evaluate``: example = doc_id, doc, target, arguments
#   [req.args ...], resps, filtered_resps, + metrics; no filter/metrics keys, no hashes; each document
#   logged once per filter);
# - lm-eval aime25 docs with the problem typed ``17_b`` where the registry has ``17_{b}``;
# - a Qwen2.5-Math fork's name ``test_qwen25-math-cot_-1_seed0_t0.0_top_k8_enable_thinkingFalse_s0_e-1.jsonl``
#   (Qwen3-30B-A3B outputs) whose line has ``gt: ''`` and the data set's ``answer``;
# - a ToRA ``math_eval`` output (no ``score``: written before evaluate.py adds it).
GSM8K_DOCS = [  # two GSM8K test rows (openai/gsm8k, main, test), as lm-eval's doc
    {"question": "Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins "
                 "for her friends every day with four. She sells the remainder at the farmers' market daily for $2 "
                 "per fresh duck egg. How much in dollars does she make every day at the farmers' market?",
     "answer": "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 every day "
               "at the farmer\u2019s market.\n#### 18"},
    {"question": "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total does it "
                 "take?",
     "answer": "It takes 2/2=<<2/2=1>>1 bolt of white fiber\nSo the total amount of fabric is 2+1=<<2+1=3>>3 bolts "
               "of fabric\n#### 3"},
]
QWEN_FORK_NAME = "test_qwen25-math-cot_-1_seed0_t0.0_top_k8_enable_thinkingFalse_s0_e-1.jsonl"


def write_lm_eval_gsm8k(directory: Path, *, date: str = LM_EVAL_DATE, task: str = "gsm8k") -> Path:
    """samples_gsm8k_<date>.jsonl: one greedy generation per document, filters strict-match + flexible-extract."""
    rows = []
    for flt in ("strict-match", "flexible-extract"):
        for doc_id, doc in enumerate(GSM8K_DOCS):
            value = doc["answer"].rsplit("#### ", 1)[1]
            text = f"She has 16 - 3 - 4 = 9 eggs left. 9 * 2 = 18.\n#### {value}" if doc_id == 0 else \
                f"The total is {value} bolts."
            extracted = value if doc_id == 0 or flt == "flexible-extract" else "[invalid]"
            rows.append({"doc_id": doc_id, "doc": doc, "target": doc["answer"],
                         "arguments": {"gen_args_0": {"arg_0": f"Question: {doc['question']}\nAnswer:", "arg_1": {
                             "until": ["Question:", "</s>", "<|im_end|>"], "do_sample": False, "temperature": 0.0}}},
                         "resps": [[text]], "filtered_resps": [extracted], "filter": flt, "metrics": ["exact_match"],
                         "doc_hash": "3" * 64, "prompt_hash": "4" * 64, "target_hash": "5" * 64,
                         "exact_match": 1.0 if extracted == value else 0.0})
    (directory / f"results_{date}.json").parent.mkdir(parents=True, exist_ok=True)
    (directory / f"results_{date}.json").write_text(json.dumps({"lm_eval_version": "0.4.9", "git_hash": "abc1234",
                                                                "model_name": "fixture-model"}), encoding="utf-8")
    return _write(directory / f"samples_{task}_{date}.jsonl", rows)


def write_lm_eval_old(directory: Path, data_dir: Path) -> Path:
    """An lm-eval 0.4.0 samples file: no filter/metrics keys, arguments [[prompt, kwargs]], two filters
    (every document logged twice), the metric exact_match among the line's keys."""
    rows = []
    for _ in ("strict-match", "flexible-extract"):
        for doc_id, doc in enumerate(math500(data_dir)):
            rows.append({"doc_id": doc_id, "doc": doc, "target": doc["answer"],
                         "arguments": [[f"Problem: {doc['problem']}\nAnswer:", {"until": ["Problem:"],
                                                                                 "do_sample": False}]],
                         "resps": [[completions(doc["answer"])[0 if doc_id != 1 else 1]]],
                         "filtered_resps": [doc["answer"] if doc_id != 1 else "7919"],
                         "exact_match": 1.0 if doc_id != 1 else 0.0})
    return _write(directory / f"samples_hendrycks_math500_{LM_EVAL_DATE}.jsonl", rows)


def write_lm_eval_aime25(directory: Path, data_dir: Path, *, n: int = 3) -> Path:
    """samples_aime25_<date>.jsonl whose problems are typed as another copy of AIME 2025 types them
    (``17_b`` for the registry's ``17_{b}``, other spacing)."""
    with (Path(data_dir) / "aime25.jsonl").open(encoding="utf-8") as fh:
        docs = [json.loads(line) for _, line in zip(range(n), fh)]
    rows = []
    for doc_id, doc in enumerate(docs):
        problem = doc["problem"].replace("_{b}", "_b").replace("$b>9$", "$b > 9$")
        rows.append({"doc_id": doc_id, "doc": {"id": doc["id"], "problem": problem, "answer": doc["answer"]},
                     "target": doc["answer"], "arguments": {"gen_args_0": {"arg_0": problem, "arg_1": {
                         "until": [], "do_sample": True, "temperature": 0.6, "max_gen_toks": 32768}}},
                     "resps": [[f"\\boxed{{{doc['answer']}}}"]], "filtered_resps": [doc["answer"]], "filter": "none",
                     "metrics": ["exact_match"], "exact_match": 1.0})
    return _write(directory / f"samples_aime25_{LM_EVAL_DATE}.jsonl", rows)


def write_qwen_fork(directory: Path, data_dir: Path, *, data_name: str = "math500") -> Path:
    """A Qwen2.5-Math fork's output (settings tokens in the name) with one ``gt: ''`` line that has the
    data set's ``answer``, and one with neither."""
    rows = []
    for idx, doc in enumerate(math500(data_dir)):
        rows.append({"idx": idx, "question": doc["problem"], "gt_cot": doc["solution"],
                     "gt": doc["answer"] if idx == 0 else "", "answer": doc["answer"] if idx == 1 else "",
                     "code": completions(doc["answer"])[:1], "pred": [doc["answer"]], "report": [None],
                     "score": [True]})
    return _write(directory / data_name / QWEN_FORK_NAME, rows)


def write_tora(directory: Path, data_dir: Path) -> Path:
    """ToRA's math_eval output: idx, question, gt_cot, gt, code, pred, report; no ``score``."""
    rows = [{"idx": idx, "question": doc["problem"], "gt_cot": doc["solution"], "gt": doc["answer"],
             "code": completions(doc["answer"])[:2], "pred": [doc["answer"], "7919"], "report": [None, None]}
            for idx, doc in enumerate(math500(data_dir))]
    return _write(directory / "math" / "test_tora_-1_seed0_t0.0_s0_e-1.jsonl", rows)
