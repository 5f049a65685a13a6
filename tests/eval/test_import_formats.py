"""`dsdr-eval import`: each source format (a small file in that tool's exact schema, tests/helpers/import_sources.py)
becomes a run directory with `run`'s sample keys, a config.json of kind "import", and the source's verdicts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from helpers import import_sources as src
from dsdr_eval.cli import main
from dsdr_eval.rundir.samples import SCHEMA_FIELDS, read_samples


def _import(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["import", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _config(run: Path) -> dict:
    return json.loads((run / "config.json").read_text(encoding="utf-8"))


def test_lm_eval_samples_become_a_run(tmp_path, data_dir, capsys):
    path = src.write_lm_eval(tmp_path / "lm", data_dir, filters=("strict-match", "flexible-extract"))
    run = tmp_path / "run"
    code, out, err = _import(capsys, "--from", "lm-eval", path, "--out", run)
    assert code == 0, err
    samples = read_samples(run / "samples.jsonl")
    docs = src.math500(data_dir)
    assert len(samples) == 9  # 3 docs x 3 repeats; the second filter's lines (same generations) are skipped
    # no --benchmark: the task hendrycks_math500 is the registered math500, matched by text (its ids)
    assert [(s.problem_id, s.sample_idx) for s in samples] == [(d["id"], i) for d in docs for i in range(3)]
    assert [s.extra["source_id"] for s in samples[::3]] == [0, 1, 2]
    assert {s.benchmark for s in samples} == {"math500"} and {s.phase for s in samples} == {"sampling"}
    assert [s.gold for s in samples[::3]] == [d["answer"] for d in docs]
    assert samples[0].prompt.startswith("Problem: ") and samples[0].problem == docs[0]["problem"]
    assert {(s.temperature, s.top_p, s.max_tokens, s.seed) for s in samples} == {(0.6, 0.95, 1024, None)}
    # the per-doc metric judges the filter's output (first generation? majority vote?), not each completion
    assert all("source_correct" not in s.extra for s in samples)
    for sample in samples:  # the same keys as `run` writes, plus the source's fields
        assert set(sample.to_json()) - {"source_correct", "source_extracted", "source_id"} <= set(SCHEMA_FIELDS)
    config = _config(run)
    assert config["kind"] == "import"
    assert config["source"]["tool"] == "lm-eval" and config["source"]["version"] == "0.4.9"
    assert config["source"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert config["source"]["sampling"] == {"temperature": 0.6, "top_p": 0.95, "max_tokens": 1024, "seed": "unknown"}
    assert config["source"]["details"]["filter"] == "strict-match"
    assert config["protocol"]["phases"] == [{"phase": "sampling", "n": 3, "temperature": 0.6, "top_p": 0.95}]
    assert "flexible-extract" in out and "seed" in out
    assert "benchmark math500 (inferred: lm-eval names the data set 'hendrycks_math500'): 3 of 3 source problems " \
           "matched" in out and "warning" not in err
    assert config["benchmarks"][0]["registry"]["inferred"] == "lm-eval names the data set 'hendrycks_math500'"

    other = tmp_path / "run2"
    assert _import(capsys, "--from", "lm-eval", path, "--out", other, "--lm-eval-filter", "flexible-extract")[0] == 0
    assert _config(other)["source"]["details"]["filter"] == "flexible-extract"


def test_lm_eval_without_results_file_has_unknown_version(tmp_path, data_dir, capsys):
    path = src.write_lm_eval(tmp_path / "lm", data_dir, repeats=1)
    (tmp_path / "lm" / f"results_{src.LM_EVAL_DATE}.json").unlink()
    code, _, err = _import(capsys, "--from", "lm-eval", path, "--out", tmp_path / "run")
    assert code == 0, err
    config = _config(tmp_path / "run")
    assert config["source"]["version"] is None and any("version unknown" in n for n in config["source"]["notes"])
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [s.extra.get("source_correct") for s in samples] == [True, False, True]  # one generation: its verdict
    assert [s.extra.get("source_extracted") for s in samples] == [d["answer"] if i != 1 else "7919"
                                                                  for i, d in enumerate(src.math500(data_dir))]


def test_qwen_math_outputs_become_a_run(tmp_path, data_dir, capsys):
    path = src.write_qwen_math(tmp_path / "outputs", data_dir)
    code, _, err = _import(capsys, "--from", "qwen-math", path, "--out", tmp_path / "run")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert len(samples) == 9 and {s.benchmark for s in samples} == {"math500"}  # the data_name directory
    assert [s.extra["source_correct"] for s in samples] == [True, False, False] * 3
    assert [s.extra["source_extracted"] for s in samples[:3]] == [src.math500(data_dir)[0]["answer"], "7919", ""]
    config = _config(tmp_path / "run")
    assert config["source"]["sampling"] == {"temperature": 0.6, "top_p": "unknown", "max_tokens": "unknown", "seed": 0}
    assert config["source"]["details"]["prompt_type"] == "qwen25-math-cot"
    assert config["source"]["version"] is None


def test_verl_validation_dump_becomes_a_run(tmp_path, data_dir, capsys):
    src.write_verl(tmp_path / "val", data_dir, step=20)
    src.write_verl(tmp_path / "val", data_dir, step=40)
    code, _, err = _import(capsys, "--from", "verl", tmp_path / "val", "--out", tmp_path / "run")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [(s.problem_id, s.sample_idx) for s in samples] == [(str(p), i) for p in range(3) for i in range(3)]
    assert samples[0].prompt.startswith("<|im_start|>user") and samples[0].problem is None
    assert [s.extra["source_correct"] for s in samples] == [True, False, False] * 3
    config = _config(tmp_path / "run")
    assert config["source"]["details"]["step"] == 40 and config["source"]["file"].endswith("40.jsonl")
    assert set(config["source"]["sampling"].values()) == {"unknown"}
    assert _import(capsys, "--from", "verl", tmp_path / "val", "--out", tmp_path / "r20", "--step", "20")[0] == 0
    assert _config(tmp_path / "r20")["source"]["details"]["step"] == 20


def test_verl_rewards_that_are_not_0_1_give_no_verdict(tmp_path, data_dir, capsys):
    path = src.write_verl(tmp_path / "val", data_dir, with_acc=False)  # scores are +1 / -1
    assert _import(capsys, "--from", "verl", path, "--out", tmp_path / "run")[0] == 0
    assert all("source_correct" not in s.extra for s in read_samples(tmp_path / "run" / "samples.jsonl"))


def test_plain_jsonl_with_a_field_mapping(tmp_path, capsys):
    rows = [{"uid": "a", "ref": {"answer": "4"}, "outs": ["\\boxed{4}", "\\boxed{5}"], "ok": [1, 0]},
            {"uid": "b", "ref": {"answer": "9"}, "outs": "\\boxed{9}", "ok": True},
            {"uid": "a", "ref": {"answer": "4"}, "outs": "so 4", "ok": False}]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code, _, err = _import(capsys, "--from", "jsonl", path, "--out", tmp_path / "run", "--id-field", "uid",
                           "--gold-field", "ref.answer", "--completion-field", "outs", "--correct-field", "ok",
                           "--benchmark", "mine")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [(s.benchmark, s.problem_id, s.sample_idx, s.extra["source_correct"]) for s in samples] == [
        ("mine", "a", 0, True), ("mine", "a", 1, False), ("mine", "b", 0, True), ("mine", "a", 2, False)]


def test_benchmark_registry_gives_ids_gold_and_metadata(tmp_path, data_dir, capsys):
    path = src.write_qwen_math(tmp_path / "outputs", data_dir)
    code, _, err = _import(capsys, "--from", "qwen-math", path, "--out", tmp_path / "run", "--benchmark", "math500",
                           "--data-dir", data_dir)
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [s.problem_id for s in samples[::3]] == [d["id"] for d in src.math500(data_dir)]
    assert [s.extra["source_id"] for s in samples[::3]] == [0, 1, 2]
    assert _config(tmp_path / "run")["benchmarks"][0]["registry"]["n_matched"] == 3


@pytest.mark.parametrize(("tool", "mutate", "expected"), [
    ("lm-eval", lambda r: r.pop("resps"), ":1:resps: missing required field 'resps'"),
    ("lm-eval", lambda r: r.update(resps=[["a"], ["b"]]), ":1:resps: 2 requests for one document"),
    ("lm-eval", lambda r: r.update(resps=[["a", 3]]), ":1:resps.0.1: must be a string (got number)"),
    ("lm-eval", lambda r: r.update(target="", doc={**r["doc"], "answer": " "}), ":1:target: empty gold answer"),
    ("qwen-math", lambda r: r.update(code="text"), ":1:code: must be a list of completions (got string)"),
    ("qwen-math", lambda r: r.update(score=[True]), ":1:score: must be a list of 3 labels"),
    ("qwen-math", lambda r: r.pop("gt"), ":1:gt: missing gold answer"),
    ("verl", lambda r: r.pop("gts"), ":1:gts: missing gold answer 'gts'"),
    ("verl", lambda r: r.update(output=None), ":1:output: missing required field 'output'"),
    ("verl", lambda r: r.update(acc="yes"), ":1:acc: must be true/false or 0/1"),
])
def test_bad_input_names_file_line_field_and_exits_2(tmp_path, data_dir, capsys, tool, mutate, expected):
    writer = {"lm-eval": src.write_lm_eval, "qwen-math": src.write_qwen_math, "verl": src.write_verl}[tool]
    path = writer(tmp_path / "source", data_dir)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    mutate(rows[0])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    # --benchmark names a label only (no registry gold to fall back on); --strict: a bad gold stops the import
    code, _, err = _import(capsys, "--from", tool, path, "--out", tmp_path / "run", "--strict", "--benchmark", "mine")
    assert code == 2
    assert err.startswith(f"error: {path}{expected}") and "Traceback" not in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run" / "samples.jsonl").exists()


def test_refuses_an_existing_run_and_a_conflicting_gold(tmp_path, capsys):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"id": 1, "answer": "4", "completion": "4"}\n{"id": 1, "answer": "5", "completion": "5"}\n')
    code, _, err = _import(capsys, "--from", "jsonl", path, "--out", tmp_path / "run")
    assert code == 2 and f"{path}:2: gold answer '5' differs from '4'" in err
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "samples.jsonl").write_text("")
    code, _, err = _import(capsys, "--from", "jsonl", path, "--out", tmp_path / "done")
    assert code == 2 and "already exists" in err


def test_lighteval_details_become_a_run(tmp_path, data_dir, capsys):
    path = src.write_lighteval(tmp_path / "out", data_dir)
    code, _, err = _import(capsys, "--from", "lighteval", path, "--out", tmp_path / "run")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    docs = src.math500(data_dir)
    assert [(s.benchmark, s.problem_id, s.gold, s.extra["source_id"]) for s in samples] == [
        ("math500", d["id"], d["answer"], str(i)) for i, d in enumerate(docs)]  # lighteval|math_500|0 is math500
    assert [s.extra["source_correct"] for s in samples] == [True, False, True]
    assert samples[0].problem == docs[0]["problem"] and samples[0].prompt.startswith("<|user|>Solve:")
    config = _config(tmp_path / "run")
    assert config["source"]["version"] == "git 0a1b2c3"
    assert config["source"]["sampling"] == {"temperature": 0.6, "top_p": 0.95, "max_tokens": 2048, "seed": 7}
    assert any("generation_size" in note for note in config["source"]["notes"])


def test_lighteval_several_samples_per_doc_and_bad_gold_index(tmp_path, data_dir, capsys):
    import pyarrow.parquet as pq

    path = src.write_lighteval(tmp_path / "out", data_dir, num_samples=2)
    assert _import(capsys, "--from", "lighteval", path, "--out", tmp_path / "run")[0] == 0
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [s.sample_idx for s in samples] == [0, 1] * 3 and all("source_correct" not in s.extra for s in samples)
    rows = pq.read_table(path).to_pylist()
    rows[1]["doc"]["gold_index"] = 3
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows), path)
    code, _, err = _import(capsys, "--from", "lighteval", path, "--out", tmp_path / "bad")
    assert code == 2 and err.startswith(f"error: {path}:2:doc.gold_index: 3 is not an index of doc.choices")


def test_openai_batch_output_with_its_input_and_a_benchmark(tmp_path, data_dir, capsys):
    inputs, outputs = src.write_openai_batch(tmp_path / "batch", data_dir)
    code, _, err = _import(capsys, "--from", "openai-batch", outputs, "--out", tmp_path / "run")
    assert code == 2 and "--batch-input" in err and "--benchmark" in err
    code, out, err = _import(capsys, "--from", "openai-batch", outputs, "--batch-input", inputs, "--benchmark",
                             "math500", "--data-dir", data_dir, "--out", tmp_path / "run")
    assert code == 0, err
    docs = src.math500(data_dir)
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    # problem 0 asked twice (4 completions), problem 1 once, problem 2's request failed
    assert [(s.problem_id, s.sample_idx) for s in samples] == [(docs[0]["id"], i) for i in range(2)] + [
        (docs[1]["id"], 0), (docs[1]["id"], 1), (docs[0]["id"], 2), (docs[0]["id"], 3)]
    assert {(s.temperature, s.top_p, s.max_tokens, s.seed) for s in samples} == {(0.7, 0.9, 512, 3)}
    assert samples[0].gold == docs[0]["answer"] and "1 failed requests" in out
    config = _config(tmp_path / "run")
    assert config["source"]["tool"] == "openai-batch" and config["benchmarks"][0]["registry"]["n_matched"] == 2


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda r: r.pop("custom_id"), ":1:custom_id: missing required field 'custom_id'"),
    (lambda r: r.update(custom_id="nope"), ":1:custom_id: 'nope' is not in the batch input file"),
    (lambda r: r["response"]["body"].update(choices=[]), ":1:response.body.choices: must be a non-empty list"),
    (lambda r: r["response"]["body"]["choices"][0]["message"].update(content=5),
     ":1:response.body.choices.0: content must be a string (got number)"),
])
def test_bad_openai_batch_lines(tmp_path, data_dir, capsys, mutate, expected):
    inputs, outputs = src.write_openai_batch(tmp_path / "batch", data_dir)
    rows = [json.loads(line) for line in outputs.read_text(encoding="utf-8").splitlines()]
    mutate(rows[0])
    outputs.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code, _, err = _import(capsys, "--from", "openai-batch", outputs, "--batch-input", inputs, "--benchmark",
                           "math500", "--data-dir", data_dir, "--out", tmp_path / "run")
    assert code == 2 and err.startswith(f"error: {outputs}{expected}") and len(err.splitlines()) == 1


def test_verl_prompts_are_matched_to_the_benchmark_problem_they_quote(tmp_path, data_dir, capsys):
    path = src.write_verl(tmp_path / "val", data_dir)
    code, _, err = _import(capsys, "--from", "verl", path, "--out", tmp_path / "run", "--benchmark", "math500",
                           "--data-dir", data_dir)
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    docs = src.math500(data_dir)
    assert [(s.benchmark, s.problem_id, s.problem, s.gold) for s in samples[::3]] == [
        ("math500", d["id"], d["problem"], d["answer"]) for d in docs]
    assert samples[0].prompt.startswith("<|im_start|>user")


def test_hostile_completion_text_is_cleaned_not_fatal(tmp_path, capsys):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"id": 1, "answer": "4", "completion": ["ok \\\\boxed{4}", "bad \\ud800 text"]}\n'
                    '{"id": 2, "answer": "5", "completion": "x\\udfff"}\n', encoding="utf-8")
    code, _, err = _import(capsys, "--from", "jsonl", path, "--out", tmp_path / "run")
    assert code == 0, err
    assert "completion: lone surrogate(s)" in err and "in 2 samples" in err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [s.completion for s in samples] == ["ok \\boxed{4}", "bad \ufffd text", "x\ufffd"]
