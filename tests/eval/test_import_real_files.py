"""`dsdr-eval import` on the cases real output files hit (issue 21 items 1-7, issue 24 items 4 and 7 and its
clean errors): each fixture is in its tool's exact schema (tests/helpers/import_sources.py says where each layout is
from); every importer's bad-gold, numeric-gold, detection and hostile-field cases; the run directory after
a failure or a kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import import_sources as src
from helpers.faults import fault_argv
from dsdr_eval.cli import main
from dsdr_eval.importers.detect import file_format
from dsdr_eval.importers.qwen_math import file_settings
from dsdr_eval.importers.source import match_key
from dsdr_eval.importers.write import registry_name
from dsdr_eval.rundir.samples import read_samples

REPO = Path(__file__).resolve().parents[2]


def _import(capsys, *argv) -> tuple[int, str, str]:
    code = main(["import", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _config(run: Path) -> dict:
    return json.loads((run / "config.json").read_text(encoding="utf-8"))


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _put(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _one_line_error(code: int, err: str, prefix: str) -> None:
    assert code == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: {prefix}"), err


# ----------------------------------------------------------------------------- 1. bad golds

def test_empty_gold_uses_the_fallback_field_then_the_registry_then_is_skipped(tmp_path, data_dir, capsys):
    path = src.write_qwen_fork(tmp_path / "out", data_dir, data_name="mine")  # not a registered data set
    code, out, err = _import(capsys, path, "--out", tmp_path / "run")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    docs = src.math500(data_dir)
    # line 1: gt; line 2: gt '' -> the data set's 'answer'; line 3: neither -> skipped, the file is kept
    assert [(s.problem_id, s.gold) for s in samples] == [("0", docs[0]["answer"]), ("1", docs[1]["answer"])]
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "skipped 1 record with an unusable gold answer" in warnings[0]
    assert f"first: {path}:3:gt: empty gold answer" in warnings[0] and "--strict" in warnings[0]
    source = _config(tmp_path / "run")["source"]
    assert source["skipped"] == {"n": 1, "records": [f"{path}:3:gt: empty gold answer (got '')"]}
    assert any("'answer' field where 'gt' is empty" in note for note in source["notes"])

    code, _, err = _import(capsys, path, "--out", tmp_path / "strict", "--strict")
    _one_line_error(code, err, f"{path}:3:gt: empty gold answer")
    assert not (tmp_path / "strict").exists()


def test_a_bad_gold_of_a_problem_the_registry_knows_takes_the_registry_gold(tmp_path, data_dir, capsys):
    path = src.write_qwen_fork(tmp_path / "out", data_dir)  # outputs/math500/: the registered math500
    code, out, err = _import(capsys, path, "--out", tmp_path / "run")
    assert code == 0 and "warning" not in err, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [s.gold for s in samples] == [d["answer"] for d in src.math500(data_dir)]
    assert _config(tmp_path / "run")["source"]["skipped"]["n"] == 0


@pytest.mark.parametrize("tool", ["jsonl", "lm-eval", "verl", "lighteval"])
def test_every_importer_skips_a_record_with_an_empty_gold(tmp_path, data_dir, capsys, tool):
    if tool == "lighteval":
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = src.write_lighteval(tmp_path / "le", data_dir)
        rows = pq.read_table(path).to_pylist()
        rows[1]["doc"]["choices"] = ["  "]
        pq.write_table(pa.Table.from_pylist(rows), path)
        field = "doc.choices.0"
    else:
        writer = {"jsonl": _plain_file, "lm-eval": src.write_lm_eval, "verl": src.write_verl}[tool]
        path = writer(tmp_path / "source", data_dir)
        rows = _rows(path)
        field = {"jsonl": "answer", "lm-eval": "target", "verl": "gts"}[tool]
        rows[1][field] = ""
        if tool == "lm-eval":
            rows[1]["doc"]["answer"] = ""  # its fallback field empty too
        _put(path, rows)
    code, _, err = _import(capsys, "--from", tool, path, "--out", tmp_path / "run", "--benchmark", "label-only")
    assert code == 0, err
    assert f"first: {path}:2:{field}: empty gold answer" in err
    assert _config(tmp_path / "run")["source"]["skipped"]["n"] == 1


def _plain_file(directory: Path, data_dir: Path) -> Path:
    directory.mkdir(parents=True)
    path = directory / "mine.jsonl"
    _put(path, [{"id": i, "answer": d["answer"], "completion": f"\\boxed{{{d['answer']}}}"}
                for i, d in enumerate(src.math500(data_dir))])
    return path


# ----------------------------------------------------------------------------- issue 24 item 4: numeric golds

@pytest.mark.parametrize(("tool", "literal", "gold"), [
    ("jsonl", "1e400", "1e400"), ("jsonl", "12345678901234567890.0", "12345678901234567890.0"),
    ("jsonl", "0.00001", "0.00001"),
    ("lm-eval", "1e400", "1e400"), ("lm-eval", "12345678901234567890.0", "12345678901234567890.0"),
    ("verl", "1e400", "1e400"), ("verl", "12345678901234567890.0", "12345678901234567890.0"),
    ("verl", "[1e400]", "1e400"), ("qwen-math", "-1.50", "-1.50"),
])
def test_numeric_golds_keep_their_literal_text(tmp_path, data_dir, capsys, tool, literal, gold):
    path = _numeric_gold_file(tmp_path, data_dir, tool, literal)
    code, _, err = _import(capsys, "--from", tool, path, "--out", tmp_path / "run", "--benchmark", "label-only")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert samples[0].gold == gold


@pytest.mark.parametrize("tool", ["jsonl", "lm-eval", "verl", "qwen-math"])
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "[NaN]"])
def test_nan_and_infinity_golds_are_refused(tmp_path, data_dir, capsys, tool, literal):
    path = _numeric_gold_file(tmp_path, data_dir, tool, literal)
    code, _, err = _import(capsys, "--from", tool, path, "--out", tmp_path / "run", "--benchmark", "label-only",
                           "--strict")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert ":1:" in err and ("is not an answer" in err or "must be a string or a number" in err
                             or "one gold answer" in err), err
    assert not (tmp_path / "run").exists()


def _numeric_gold_file(tmp_path: Path, data_dir: Path, tool: str, literal: str) -> Path:
    """The tool's fixture with the first record's gold replaced by the JSON text ``literal``."""
    if tool == "jsonl":
        path = _plain_file(tmp_path / "source", data_dir)
    else:
        writer = {"lm-eval": src.write_lm_eval, "verl": src.write_verl, "qwen-math": src.write_qwen_math}[tool]
        path = writer(tmp_path / "source", data_dir)
    field = {"jsonl": "answer", "lm-eval": "target", "verl": "gts", "qwen-math": "gt"}[tool]
    lines = path.read_text(encoding="utf-8").splitlines()
    n = 3 if tool == "verl" else 1  # verl: the three completions of the first prompt
    for i in range(n):
        row = json.loads(lines[i])
        row[field] = "@@GOLD@@"
        if tool == "lm-eval":
            row["doc"] = {"problem": row["doc"]["problem"]}  # no doc.answer to fall back on
        lines[i] = json.dumps(row).replace('"@@GOLD@@"', literal)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- 2. settings in file names

@pytest.mark.parametrize(("name", "expected"), [
    (src.QWEN_FORK_NAME, {"seed": 0, "temperature": 0.0, "top_k": 8, "enable_thinking": False, "start": 0,
                          "end": -1, "prompt_type": "qwen25-math-cot", "num_test_sample": -1}),
    ("test_qwen25-math-cot_-1_seed0_t0.6_s0_e-1.jsonl", {"seed": 0, "temperature": 0.6, "start": 0, "end": -1}),
    ("test_tora_500_seed42_t0.7_top_p0.95_n8_s0_e-1.jsonl", {"seed": 42, "temperature": 0.7, "top_p": 0.95,
                                                             "n_sampling": 8, "prompt_type": "tora"}),
    ("test_cot_-1_t1.0_seed7_max_tokens_per_call4096_s0_e-1.jsonl", {"seed": 7, "temperature": 1.0,
                                                                     "max_tokens": 4096}),
])
def test_settings_tokens_are_read_wherever_they_stand(name, expected):
    settings = file_settings(name)
    assert {key: settings.get(key) for key in expected} == expected


def test_qwen_fork_file_name_records_temperature_and_seed(tmp_path, data_dir, capsys):
    path = src.write_qwen_fork(tmp_path / "out", data_dir)
    code, out, _ = _import(capsys, path, "--out", tmp_path / "run")
    assert code == 0
    source = _config(tmp_path / "run")["source"]
    assert source["sampling"] == {"temperature": 0.0, "top_p": "unknown", "max_tokens": "unknown", "seed": 0}
    assert source["details"]["top_k"] == 8 and source["details"]["enable_thinking"] is False
    assert "not recorded by the source: top_p, max_tokens" in out


# ----------------------------------------------------------------------------- 3. problem matching

def test_match_key_ignores_latex_that_does_not_change_a_problem():
    assert match_key("for which $17_{b}$ is a divisor of $97_{b}$, $b>9$") == \
        match_key("for which $17_b$ is a  divisor of $97_b$, $b > 9$")
    assert match_key(r"\left( \dfrac{1}{2} \right)^{2}") == match_key(r"(\frac{1}{2})^2")
    assert match_key("17_{b}") != match_key("17_{c}") and match_key("x^{2}") != match_key("x^{3}")


def test_aime25_problems_typed_differently_all_match_and_the_count_is_printed(tmp_path, data_dir, capsys):
    path = src.write_lm_eval_aime25(tmp_path / "lm", data_dir)
    code, out, err = _import(capsys, path, "--out", tmp_path / "run")  # no --benchmark: the task names it
    assert code == 0, err
    assert "benchmark aime25 (inferred: lm-eval names the data set 'aime25'): 3 of 3 source problems matched" in out
    assert "warning" not in err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    registry = [json.loads(line) for line in (data_dir / "aime25.jsonl").read_text().splitlines()[:3]]
    assert [s.problem for s in samples] == [r["problem"] for r in registry]  # the registry's text, 17_{b}


def test_matching_below_90_percent_warns_on_the_terminal(tmp_path, data_dir, capsys):
    path = src.write_lm_eval_aime25(tmp_path / "lm", data_dir)
    rows = _rows(path)
    rows[0]["doc"]["problem"] = rows[0]["arguments"]["gen_args_0"]["arg_0"] = "A problem of another data set."
    _put(path, rows)
    code, out, err = _import(capsys, path, "--out", tmp_path / "run", "--benchmark", "aime25", "--data-dir", data_dir)
    assert code == 0
    assert "benchmark aime25: 2 of 3 source problems matched to the registry, 1 unmatched" in out
    assert "warning: only 67% of the source's aime25 problems matched the registry (below 90%)" in err


@pytest.mark.parametrize(("tool", "name", "expected"), [
    ("lm-eval", "aime25", "aime25"), ("lm-eval", "hendrycks_math500", "math500"), ("lm-eval", "minerva_math", None),
    ("lighteval", "lighteval|math_500|0", "math500"), ("lighteval", "lighteval|aime24|0", "aime24"),
    ("qwen-math", "minerva_math", "minerva"), ("qwen-math", "olympiadbench", "olympiadbench"),
    ("qwen-math", "gsm8k", None), ("lm-eval", None, None),
])
def test_the_benchmark_is_inferred_from_the_tools_own_name(tool, name, expected):
    assert registry_name(tool, name) == expected


# ----------------------------------------------------------------------------- 4. lm-eval files

def test_lm_eval_gsm8k_gold_is_the_value_after_hashes_and_graded_with_its_convention(tmp_path, capsys):
    path = src.write_lm_eval_gsm8k(tmp_path / "lm")
    code, out, err = _import(capsys, path, "--out", tmp_path / "run")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [s.gold for s in samples] == ["18", "3"]
    assert samples[0].prompt.startswith("Question: Janet")
    config = _config(tmp_path / "run")
    assert config["extraction"] == "gsm8k" and config["benchmarks"][0]["extraction"] == "gsm8k"
    assert "answer extraction: gsm8k" in out
    assert main(["score", str(tmp_path / "run"), "--workers", "1", "--bootstrap", "0", "--no-progress"]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["benchmarks"]["gsm8k"]["status_counts"]["correct"] == 2  # boxed would read none: 0 %


def test_extraction_option_overrides_and_an_unknown_profile_is_refused(tmp_path, capsys):
    path = src.write_lm_eval_gsm8k(tmp_path / "lm")
    assert _import(capsys, path, "--out", tmp_path / "run", "--extraction", "flexible")[0] == 0
    assert _config(tmp_path / "run")["extraction"] == "flexible"
    code, _, err = _import(capsys, path, "--out", tmp_path / "bad", "--extraction", "nope")
    _one_line_error(code, err, "unknown extraction profile 'nope'")
    assert not (tmp_path / "bad").exists()


def test_old_lm_eval_samples_without_filter_and_metrics_keys(tmp_path, data_dir, capsys):
    path = src.write_lm_eval_old(tmp_path / "lm", data_dir)
    code, out, err = _import(capsys, path, "--out", tmp_path / "run")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    docs = src.math500(data_dir)
    assert len(samples) == 3  # the second filter's pass over the same documents is skipped
    assert [s.prompt for s in samples] == [f"Problem: {d['problem']}\nAnswer:" for d in docs]
    assert [s.extra["source_correct"] for s in samples] == [True, False, True]  # the line's exact_match key
    notes = _config(tmp_path / "run")["source"]["notes"]
    assert any("lm-eval 0.4.0-0.4.2" in note and "3 further lines" in note for note in notes)


def test_a_source_without_a_verdict_field_says_so(tmp_path, data_dir, capsys):
    path = src.write_tora(tmp_path / "tora", data_dir)
    code, out, _ = _import(capsys, path, "--out", tmp_path / "run")
    assert code == 0
    assert "the source file has no verdict field" in out and "0 carry" not in out
    code, out, _ = _import(capsys, src.write_qwen_math(tmp_path / "q", data_dir), "--out", tmp_path / "q-run")
    assert "9 carry the source's verdict" in out


# ----------------------------------------------------------------------------- 6. a directory as PATH

def test_an_lm_eval_output_directory_imports_every_samples_file(tmp_path, data_dir, capsys):
    out_dir = tmp_path / "lm_out" / "org__model"
    src.write_lm_eval(out_dir, data_dir, repeats=1)
    src.write_lm_eval_aime25(out_dir, data_dir)
    code, out, err = _import(capsys, tmp_path / "lm_out", "--out", tmp_path / "run")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert sorted({s.benchmark for s in samples}) == ["aime25", "math500"] and len(samples) == 6
    source = _config(tmp_path / "run")["source"]
    assert [Path(block["file"]).name for block in source["files"]] == [
        f"samples_aime25_{src.LM_EVAL_DATE}.jsonl", f"samples_hendrycks_math500_{src.LM_EVAL_DATE}.jsonl"]
    assert source["file"] == str(tmp_path / "lm_out")


def test_a_qwen_output_directory_imports_each_data_set(tmp_path, data_dir, capsys):
    src.write_qwen_math(tmp_path / "outputs", data_dir)
    src.write_tora(tmp_path / "outputs", data_dir)  # outputs/math/...: MATH, not a registered benchmark
    code, out, err = _import(capsys, tmp_path / "outputs", "--out", tmp_path / "run")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert sorted({s.benchmark for s in samples}) == ["math", "math500"]


def test_a_directory_of_files_with_different_conventions_needs_extraction(tmp_path, data_dir, capsys):
    src.write_lm_eval_gsm8k(tmp_path / "lm")
    src.write_lm_eval_aime25(tmp_path / "lm", data_dir)
    code, _, err = _import(capsys, tmp_path / "lm", "--out", tmp_path / "run")
    _one_line_error(code, err, "these result files use different answer conventions (aime25: boxed, gsm8k: gsm8k)")
    assert not (tmp_path / "run").exists()
    assert _import(capsys, tmp_path / "lm", "--out", tmp_path / "run", "--extraction", "flexible")[0] == 0


# ----------------------------------------------------------------------------- 7. --from auto

def _every_format(tmp_path: Path, data_dir: Path) -> dict[str, Path]:
    inputs, outputs = src.write_openai_batch(tmp_path / "batch", data_dir)
    return {"lm-eval": src.write_lm_eval(tmp_path / "lm", data_dir),
            "qwen-math": src.write_qwen_math(tmp_path / "q", data_dir),
            "verl": src.write_verl(tmp_path / "v", data_dir),
            "lighteval": src.write_lighteval(tmp_path / "le", data_dir),
            "openai-batch": outputs}


def test_the_format_is_detected_from_the_content(tmp_path, data_dir):
    for tool, path in _every_format(tmp_path, data_dir).items():
        assert file_format(path) == tool
        renamed = path.with_name("renamed" + path.suffix)  # the content decides, not the name
        path.rename(renamed)
        assert file_format(renamed) == tool


@pytest.mark.parametrize("given", ["lm-eval", "qwen-math", "verl"])
def test_a_wrong_from_says_which_format_fits(tmp_path, data_dir, capsys, given):
    formats = _every_format(tmp_path, data_dir)
    for actual, path in formats.items():
        if actual in (given, "lighteval"):
            continue
        code, _, err = _import(capsys, "--from", given, path, "--out", tmp_path / "run")
        _one_line_error(code, err, f"{path}: this is {actual} output")
        assert f"use --from {actual}" in err


def test_an_openai_batch_input_file_is_told_apart(tmp_path, data_dir, capsys):
    inputs, _ = src.write_openai_batch(tmp_path / "batch", data_dir)
    code, _, err = _import(capsys, inputs, "--out", tmp_path / "run")
    _one_line_error(code, err, f"{inputs}: not a result file")
    assert "batch *input* file" in err


# ----------------------------------------------------------------------------- issue 24: clean errors

def _lighteval_table(path: Path, mutate):
    import pyarrow.parquet as pq

    pq.write_table(mutate(pq.read_table(path)), path)


def test_lighteval_metric_stored_as_a_parquet_map_is_read(tmp_path, data_dir, capsys):
    import pyarrow as pa

    path = src.write_lighteval(tmp_path / "le", data_dir)

    def as_map(table):
        values = [list(m.items()) for m in table.column("metric").to_pylist()]
        return table.set_column(table.schema.get_field_index("metric"), "metric",
                                pa.array(values, type=pa.map_(pa.string(), pa.float64())))
    _lighteval_table(path, as_map)
    code, _, err = _import(capsys, path, "--out", tmp_path / "run")
    assert code == 0, err
    assert [s.extra["source_correct"] for s in read_samples(tmp_path / "run" / "samples.jsonl")] == [True, False, True]


@pytest.mark.parametrize(("case", "expected"), [
    ("timestamp", ":2:created: value cannot be read"),
    ("metric-list", ":1:metric: must be a struct or a map"),
])
def test_lighteval_unreadable_values_are_one_line_errors(tmp_path, data_dir, capsys, case, expected):
    import pyarrow as pa

    path = src.write_lighteval(tmp_path / "le", data_dir)

    def mutate(table):
        if case == "timestamp":  # year 33658: beyond datetime's range
            return table.append_column("created", pa.array([0, 10**15, 0], type=pa.int64()).cast(pa.timestamp("s")))
        return table.set_column(table.schema.get_field_index("metric"), "metric",
                                pa.array([[1.0], [0.0], [1.0]], type=pa.list_(pa.float64())))
    _lighteval_table(path, mutate)
    code, _, err = _import(capsys, path, "--out", tmp_path / "run")
    _one_line_error(code, err, f"{path}{expected}")


@pytest.mark.parametrize(("value", "expected"), [
    ([40], ":1:step: must be an integer (the global step) (got array)"),
    ({"global": 40}, ":1:step: must be an integer (the global step) (got object)"),
    ("40", ":1:step: must be an integer (the global step) (got string)"),
])
def test_verl_step_of_the_wrong_type(tmp_path, data_dir, capsys, value, expected):
    path = src.write_verl(tmp_path / "val", data_dir)
    rows = _rows(path)
    rows[0]["step"] = value
    _put(path, rows)
    code, _, err = _import(capsys, "--from", "verl", path, "--out", tmp_path / "run")
    _one_line_error(code, err, f"{path}{expected}")


def test_verl_directory_ignores_files_that_are_not_ascii_step_numbers(tmp_path, data_dir, capsys):
    src.write_verl(tmp_path / "val", data_dir, step=20)
    src.write_verl(tmp_path / "val", data_dir, step=30).rename(tmp_path / "val" / "\u00b2.jsonl")
    (tmp_path / "val" / "\u0663\u0660.jsonl").write_text("{}\n")  # Arabic-Indic digits: isdigit() too
    code, _, err = _import(capsys, "--from", "verl", tmp_path / "val", "--out", tmp_path / "run")
    assert code == 0, err
    assert _config(tmp_path / "run")["source"]["details"]["step"] == 20
    (tmp_path / "val" / "20.jsonl").unlink()
    code, _, err = _import(capsys, "--from", "verl", tmp_path / "val", "--out", tmp_path / "run2")
    _one_line_error(code, err, f"{tmp_path / 'val'}: no <step>.jsonl validation dumps")


@pytest.mark.parametrize(("choices", "expected"), [
    (["hello", 3], ":1:response.body.choices.0: must be an object (a choice; got string)"),
    ([None], ":1:response.body.choices.0: must be an object (a choice; got null)"),
    ([{"message": "hi"}], ":1:response.body.choices.0.message: must be an object (got string)"),
    ([{"index": 0, "finish_reason": "stop"}], ":1:response.body.choices.0: has neither 'message'"),
])
def test_openai_batch_choices_that_are_not_choices(tmp_path, data_dir, capsys, choices, expected):
    inputs, outputs = src.write_openai_batch(tmp_path / "batch", data_dir)
    rows = _rows(outputs)
    rows[0]["response"]["body"]["choices"] = choices
    _put(outputs, rows)
    code, _, err = _import(capsys, outputs, "--batch-input", inputs, "--benchmark", "math500", "--data-dir", data_dir,
                           "--out", tmp_path / "run")
    _one_line_error(code, err, f"{outputs}{expected}")


_JSON_VALUES = [None, True, -1, 1.5, "", "x", [], ["x"], {}, {"a": 1}, [[1]]]


def _fuzz_cases():
    fields = {"lm-eval": ["doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
                          "exact_match"],
              "qwen-math": ["idx", "question", "gt", "code", "pred", "score", "answer"],
              "verl": ["input", "output", "gts", "score", "step", "acc", "pred"],
              "jsonl": ["id", "answer", "completion", "problem"],
              "openai-batch": ["custom_id", "response", "error"]}
    return [(tool, name) for tool, names in fields.items() for name in names]


@pytest.mark.parametrize(("tool", "field"), _fuzz_cases())
def test_any_json_value_in_any_field_is_imported_or_one_line_error(tmp_path, data_dir, capsys, tool, field):
    """Every top-level field of every importer's format replaced by every JSON type: exit 0 or 2 with
    one line naming the file, never a traceback (an escaped exception fails the test)."""
    if tool == "openai-batch":
        inputs, path = src.write_openai_batch(tmp_path / "b", data_dir)
        extra = ["--batch-input", inputs, "--benchmark", "math500", "--data-dir", data_dir]
    else:
        writer = {"lm-eval": src.write_lm_eval, "qwen-math": src.write_qwen_math, "verl": src.write_verl,
                  "jsonl": _plain_file}[tool]
        path, extra = writer(tmp_path / "s", data_dir), ["--benchmark", "label-only"]
    original = _rows(path)
    for i, value in enumerate(_JSON_VALUES):
        rows = [dict(row) for row in original]
        rows[0][field] = value
        _put(path, rows)
        code, _, err = _import(capsys, "--from", tool, path, "--out", tmp_path / f"run{i}", *extra)
        assert code in (0, 2), (value, err)
        if code == 2:
            assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: {path}"), (value, err)


# ----------------------------------------------------------------------------- issue 24 item 7, issue 32: atomicity

# The moments of an import's one commit (``rundir.commit_files``): it writes config.json's temp, then
# samples.jsonl's, then the commit record's temp (files 1-3), renames the commit record into place (the
# commit point: rename 1), then config.json (rename 2) and samples.jsonl (rename 3).
_BEFORE_COMMIT = [("kill-write", 1, 0, None), ("kill-write", 2, 0, None), ("kill-write", 3, 0, None),
                  ("replace", 1, 0, None)]
_AFTER_COMMIT = [("replace", 2, 0, None), ("replace", 3, 0, None)]


def _killed_import(path: Path, run: Path, fault) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(fault_argv(fault, ["import", path, "--out", run]), env=env, capture_output=True,
                          timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr  # killed at that moment, not before or after


def _run_files(run: Path) -> dict[str, object]:
    """What a run directory holds: every name, samples.jsonl's bytes, config.json without its time stamp."""
    config = _config(run)
    del config["created"], config["command"]
    return {"names": sorted(p.name for p in run.iterdir()), "samples": (run / "samples.jsonl").read_bytes(),
            "config": config}


@pytest.fixture(scope="module")
def clean_import(tmp_path_factory, data_dir) -> tuple[Path, dict[str, object]]:
    """A qwen-math source and the run directory an uninterrupted import makes of it."""
    root = tmp_path_factory.mktemp("clean_import")
    path = src.write_qwen_math(root / "out", data_dir)
    assert main(["import", str(path), "--out", str(root / "run")]) == 0
    return path, _run_files(root / "run")


@pytest.mark.parametrize("fault", _BEFORE_COMMIT + _AFTER_COMMIT, ids=lambda f: f"{f[0]}-{f[1]}")
def test_kill_9_at_any_point_of_an_import_the_next_import_completes_or_refuses(tmp_path, clean_import, capsys,
                                                                               fault):
    """kill -9 at each moment of the import's commit: never samples.jsonl without config.json; importing
    again either imports (killed before the commit point: the temps are cleared) or finds the killed
    import completed and refuses in one line as for any run. Either way the directory is the run an
    uninterrupted import writes, with nothing else in it."""
    path, clean = clean_import
    run = tmp_path / "run"
    _killed_import(path, run, fault)
    assert (run / "config.json").exists() or not (run / "samples.jsonl").exists()
    code, _, err = _import(capsys, path, "--out", run)
    if fault in _BEFORE_COMMIT:
        assert code == 0, err
    else:
        _one_line_error(code, err, f"{run / 'samples.jsonl'}: already exists; import into a new run directory")
    assert _run_files(run) == clean


@pytest.mark.parametrize("fault", _AFTER_COMMIT, ids=lambda f: f"{f[0]}-{f[1]}")
def test_score_completes_an_import_killed_after_its_commit_point(tmp_path, clean_import, capsys, fault):
    """The next command after a kill past the commit point need not be another import: `score` finishes
    the committed renames (samples.jsonl may still be under its temp name) and grades the run."""
    path, clean = clean_import
    run = tmp_path / "run"
    _killed_import(path, run, fault)
    assert main(["score", str(run), "--no-progress"]) == 0, capsys.readouterr().err
    assert {"config.json", "samples.jsonl", "graded.jsonl", "metrics.json"} <= {p.name for p in run.iterdir()}
    assert (run / "samples.jsonl").read_bytes() == clean["samples"]


@pytest.mark.parametrize("where", ["temp", "rename"])
def test_an_os_error_while_writing_is_one_line_and_leaves_the_directory_as_it_was(tmp_path, data_dir, capsys,
                                                                                    monkeypatch, where):
    """A full disk while samples.jsonl's temp is written: one line, nothing left (a directory the import
    created is removed, another keeps only what it held). A rename that fails after the commit point:
    one line saying the next command completes the import, which the next import then does (and refuses)."""
    import errno

    from dsdr_eval.rundir import directory, jsonl

    path = src.write_qwen_math(tmp_path / "out", data_dir)
    real_temp, real_replace = jsonl.atomic_temp, os.replace

    def full_disk(target, chunks):
        if target.name == "samples.jsonl":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_temp(target, chunks)

    def failing_rename(a, b):
        if str(b).endswith(os.sep + "samples.jsonl"):
            raise OSError(errno.EIO, "Input/output error")
        real_replace(a, b)

    if where == "temp":
        monkeypatch.setattr(directory, "atomic_temp", full_disk)
        code, _, err = _import(capsys, path, "--out", tmp_path / "run")
        _one_line_error(code, err, f"{tmp_path / 'run'}: cannot write the run directory (No space left on device)")
        assert not (tmp_path / "run").exists()  # config.json's temp, written first, was removed too
        (tmp_path / "kept").mkdir()
        (tmp_path / "kept" / "notes.txt").write_text("mine")
        code, _, err = _import(capsys, path, "--out", tmp_path / "kept")
        assert code == 2 and sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["notes.txt"]
        return
    monkeypatch.setattr(os, "replace", failing_rename)
    code, _, err = _import(capsys, path, "--out", tmp_path / "run")
    _one_line_error(code, err, f"{tmp_path / 'run'}: cannot write the run directory (Input/output error); an "
                               "interrupted update is completed by the next command")
    monkeypatch.setattr(os, "replace", real_replace)
    code, _, err = _import(capsys, path, "--out", tmp_path / "run")
    _one_line_error(code, err, f"{tmp_path / 'run' / 'samples.jsonl'}: already exists")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["config.json", "samples.jsonl"]


@pytest.mark.parametrize("column", ["doc", "metric", "model_response"])
def test_any_parquet_type_in_a_lighteval_column_is_imported_or_one_line_error(tmp_path, data_dir, capsys, column):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = src.write_lighteval(tmp_path / "le", data_dir)
    original = pq.read_table(path)
    for i, values in enumerate([pa.array([None] * 3, type=pa.null()), pa.array([1, 2, 3]), pa.array(["a"] * 3),
                                pa.array([[1]] * 3), pa.array([{"x": 1}] * 3), pa.array([b"x"] * 3),
                                pa.array([[("k", 1.0)]] * 3, type=pa.map_(pa.string(), pa.float64()))]):
        pq.write_table(original.set_column(original.schema.get_field_index(column), column, values), path)
        code, _, err = _import(capsys, path, "--out", tmp_path / f"run{i}")
        assert code in (0, 2), (values.type, err)
        if code == 2:
            assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: {path}:1:{column}"), err


def test_a_task_evaluated_twice_in_one_directory_imports_the_latest(tmp_path, data_dir, capsys):
    model = tmp_path / "lm" / "org__model"
    src.write_lm_eval_gsm8k(model, date="2026-11-01T10-00-00.000001")
    src.write_lm_eval_gsm8k(model)  # LM_EVAL_DATE: later
    code, _, err = _import(capsys, tmp_path / "lm", "--out", tmp_path / "run")
    assert code == 0, err
    assert "1 earlier result file of a task evaluated again" in err and "2026-11-01T10-00-00" in err
    assert _config(tmp_path / "run")["source"]["file"].endswith(f"samples_gsm8k_{src.LM_EVAL_DATE}.jsonl")
    src.write_lm_eval_gsm8k(tmp_path / "lm" / "org__other")  # another model's gsm8k: not one benchmark
    code, _, err = _import(capsys, tmp_path / "lm", "--out", tmp_path / "run2")
    assert code == 2 and err.splitlines()[-1].startswith(f"error: {tmp_path / 'lm'}: several result files for "
                                                         "benchmark 'gsm8k'") and "Traceback" not in err
    assert not (tmp_path / "run2").exists()


def test_a_filter_cannot_be_chosen_in_a_file_without_filter_names(tmp_path, data_dir, capsys):
    path = src.write_lm_eval_old(tmp_path / "lm", data_dir)
    code, _, err = _import(capsys, path, "--out", tmp_path / "run", "--lm-eval-filter", "strict-match")
    _one_line_error(code, err, f"{path}:1:filter: missing: this file (lm-eval 0.4.0-0.4.2) names no filters")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs mkfifo")
def test_a_fifo_as_path_is_refused_without_reading_it(tmp_path):
    fifo = tmp_path / "samples.jsonl"
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "dsdr_eval.cli", "import", str(fifo), "--out", str(tmp_path / "run")],
                          env=env, capture_output=True, text=True, timeout=60)  # a read would block: TimeoutExpired
    assert done.returncode == 2 and done.stderr == f"error: {fifo}: not a regular file or a directory\n"


def test_an_unreadable_source_is_one_line(tmp_path, data_dir, capsys, monkeypatch):
    import dsdr_eval.importers.source as source

    path = src.write_qwen_math(tmp_path / "out", data_dir)

    def denied(_path, **_):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(source, "read_bytes", denied)  # running as root, chmod 000 would still be readable
    code, _, err = _import(capsys, "--from", "qwen-math", path, "--out", tmp_path / "run")
    _one_line_error(code, err, f"{path}: cannot read (Permission denied)")
