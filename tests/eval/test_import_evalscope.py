"""`dsdr-eval import` of evalscope review files, on excerpts of real ones (tests/eval/real_files/PROVENANCE.md):
the current layout (evalscope 1.x ``ReviewResult`` lines, MATH-500, DeepSeek-V3.2 reasoner and Doubao) and
the early-2025 layout (``chat.completion`` lines with ``choices[].review``, evalscope's own GSM8K example)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from dsdr_eval.cli import main
from dsdr_eval.importers.detect import file_format
from dsdr_eval.importers.evalscope import benchmark_name
from dsdr_eval.rundir.samples import read_samples

REAL = Path(__file__).resolve().parent / "real_files"
CURRENT = REAL / "evalscope-1.x" / "eval_result"
DEEPSEEK = CURRENT / "reviews" / "deepseek-reasoner-v3.2" / "math_500_Level 4.jsonl"
DEEPSEEK_PREDICTIONS = CURRENT / "predictions" / "deepseek-reasoner-v3.2" / "math_500_Level 4.jsonl"
DOUBAO = CURRENT / "reviews" / "doubao-seed-1-6-251015" / "math_500_Level 3.jsonl"
EARLY = REAL / "evalscope-2025-01" / "20250117_154856" / "reviews" / "Qwen2.5-7B-Instruct" / "gsm8k_main.jsonl"
_JSON_VALUES = [None, True, -1, 1.5, "", "x", [], ["x"], {}, {"a": 1}, [[1]]]


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _put(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def _config(run: Path) -> dict:
    return json.loads((run / "config.json").read_text(encoding="utf-8"))


def _registry(data_dir: Path, name: str) -> dict[str, dict]:
    return {row["id"]: row for row in _rows(data_dir / f"{name}.jsonl")}


def _reasoning_parts(row: dict) -> str:
    """The prediction line's reasoning, read here from evalscope's ContentReasoning parts."""
    content = row["model_output"]["choices"][0]["message"]["content"]
    return "\n".join(part["reasoning"] for part in content if part["type"] == "reasoning")


def test_current_layout_imports_on_auto_as_math500_with_the_reasoning_of_its_prediction_file(
        tmp_path, data_dir, capsys):
    """No --from, no --benchmark: the review file is evalscope's, its problems are MATH-500's (the ids
    evalscope keeps in sample_metadata.question_id are the registry's), each line's verdict is the
    ``acc`` value, and the thought the review does not hold comes from the prediction file beside it."""
    code, out, err = _run(capsys, "import", DEEPSEEK, "--out", tmp_path / "run", "--data-dir", data_dir)
    assert code == 0, err
    assert "from evalscope" in out and "2 of 2 source problems matched to the registry" in out, out
    reviews, predictions = _rows(DEEPSEEK), {row["index"]: row for row in _rows(DEEPSEEK_PREDICTIONS)}
    samples = {s.problem_id: s for s in read_samples(tmp_path / "run" / "samples.jsonl")}
    registry = _registry(data_dir, "math500")
    assert sorted(samples) == sorted(r["sample_score"]["sample_metadata"]["question_id"] for r in reviews)
    for review in reviews:
        sample = samples[review["sample_score"]["sample_metadata"]["question_id"]]
        assert sample.benchmark == "math500" and sample.gold == registry[sample.problem_id]["answer"]
        assert sample.completion == review["sample_score"]["score"]["prediction"]
        assert sample.extra["source_correct"] is (review["sample_score"]["score"]["value"]["acc"] == 1.0)
        assert sample.extra["source_extracted"] == review["sample_score"]["score"]["extracted_prediction"]
        prediction = predictions[review["index"]]
        assert sample.reasoning == _reasoning_parts(prediction) and sample.reasoning
        assert sample.n_reasoning_tokens == prediction["model_output"]["usage"]["reasoning_tokens"]
        assert sample.finish_reason == "stop"
    config = _config(tmp_path / "run")
    assert config["extraction"] == "flexible" and config["source"]["tool"] == "evalscope"


def test_without_its_prediction_file_a_review_is_imported_without_reasoning(tmp_path, data_dir, capsys):
    work = tmp_path / "reviews" / "deepseek-reasoner-v3.2"
    work.mkdir(parents=True)
    shutil.copy(DEEPSEEK, work)
    code, out, err = _run(capsys, "import", work / DEEPSEEK.name, "--out", tmp_path / "run", "--data-dir", data_dir)
    assert code == 0, err
    assert all(s.reasoning is None for s in read_samples(tmp_path / "run" / "samples.jsonl"))
    assert "predictions/" not in out


def _with_predictions(tmp_path: Path, edit) -> Path:
    """The DeepSeek review in a fresh output directory, beside its prediction lines changed by ``edit``."""
    root = tmp_path / "out"
    review = root / "reviews" / "m" / DEEPSEEK.name
    review.parent.mkdir(parents=True)
    shutil.copy(DEEPSEEK, review)
    predictions = _rows(DEEPSEEK_PREDICTIONS)
    for row in predictions:
        edit(row["model_output"]["choices"][0])
    _put(root / "predictions" / "m" / DEEPSEEK.name, predictions)
    return review


@pytest.mark.parametrize("stop_reason", ["max_tokens", "model_length"])
def test_a_stop_for_the_token_budget_is_a_length_finish(tmp_path, data_dir, capsys, stop_reason):
    """evalscope's StopReason for a spent budget is dsdr's "length" (what truncation is counted from)."""
    review = _with_predictions(tmp_path, lambda choice: choice.update(stop_reason=stop_reason))
    code, _, err = _run(capsys, "import", review, "--out", tmp_path / "run", "--data-dir", data_dir)
    assert code == 0, err
    assert {s.finish_reason for s in read_samples(tmp_path / "run" / "samples.jsonl")} == {"length"}


def test_reasoning_in_the_review_messages_is_kept(tmp_path, data_dir, capsys):
    """Newer evalscope reviews carry ``messages``: the assistant's reasoning part is the sample's reasoning."""
    rows = _rows(DOUBAO)
    for i, row in enumerate(rows):
        row["messages"] = [{"role": "user", "content": row.pop("input")},
                           {"role": "assistant", "content": [{"type": "reasoning", "reasoning": f"thought {i}"},
                                                             {"type": "text", "text": "answer"}]}]
    path = tmp_path / "reviews" / "m" / DOUBAO.name
    _put(path, rows)
    code, _, err = _run(capsys, "import", path, "--out", tmp_path / "run", "--data-dir", data_dir)
    assert code == 0, err
    by_group = {str(row["sample_score"]["group_id"]): row for row in rows}
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert len(samples) == 2
    for sample in samples:
        row = by_group[str(sample.extra["source_id"])]
        assert sample.reasoning == row["messages"][1]["content"][0]["reasoning"]
        assert sample.prompt == row["messages"][0]["content"]


def _unspaced(answer: str) -> str:
    """An answer as evalscope's strip_answer_string leaves it: no whitespace, \\dfrac written \\frac."""
    return re.sub(r"\s+", "", answer).replace("\\dfrac", "\\frac")


def test_evalscope_extracts_the_answers_evalscope_extracted(tmp_path, data_dir, capsys):
    """The profile recorded (``flexible``) finds, in every real completion, the answer evalscope's own
    extract_answer found (compared without the spacing and \\dfrac evalscope's normaliser drops)."""
    for name, path in (("a", DEEPSEEK), ("b", DOUBAO)):
        assert _run(capsys, "import", path, "--out", tmp_path / name, "--data-dir", data_dir)[0] == 0
        code, out, err = _run(capsys, "score", tmp_path / name)
        assert code == 0, err
        graded = _rows(tmp_path / name / "graded.jsonl")
        assert len(graded) == 2
        for row in graded:
            assert _unspaced(row["extracted"]) == _unspaced(row["source_extracted"]), row["extracted"]


def test_early_layout_chat_completion_reviews(tmp_path, capsys):
    """evalscope's own January 2025 example: one chat.completion per problem, its verdict and gold in
    ``choices[0].review``, the problem in ``raw_input``; its gsm8k took the last number."""
    assert file_format(EARLY) == "evalscope"
    code, out, err = _run(capsys, "import", EARLY, "--out", tmp_path / "run")
    assert code == 0, err
    rows = _rows(EARLY)
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [s.gold for s in samples] == [row["choices"][0]["review"]["gold"] for row in rows] == ["18", "64"]
    assert [s.extra["source_correct"] for s in samples] == [True, False]
    assert [s.extra["source_extracted"] for s in samples] == [row["choices"][0]["review"]["pred"] for row in rows]
    assert [s.problem for s in samples] == [row["raw_input"]["question"] for row in rows]
    assert [s.prompt for s in samples] == [row["origin_prompt"]["data"][0] for row in rows]
    assert [s.completion for s in samples] == [row["choices"][0]["message"]["content"] for row in rows]
    config = _config(tmp_path / "run")
    assert config["benchmarks"][0]["name"] == "gsm8k" and config["extraction"] == "gsm8k"


def test_early_layout_reasoning_content_and_finish_reason_are_kept(tmp_path, capsys):
    rows = _rows(EARLY)
    rows[0]["choices"][0]["message"]["reasoning_content"] = "Let me think."
    rows[1]["choices"][0]["finish_reason"] = "length"
    path = tmp_path / "gsm8k_main.jsonl"
    _put(path, rows)
    code, _, err = _run(capsys, "import", path, "--out", tmp_path / "run")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert samples[0].reasoning == "Let me think." and samples[1].reasoning is None
    assert [s.finish_reason for s in samples] == ["stop", "length"]


@pytest.mark.parametrize(("source", "edit", "field"), [
    ("current", lambda r: r["sample_score"]["score"].pop("prediction"), "sample_score.score.prediction"),
    ("current", lambda r: r["sample_score"]["score"].update(value={"acc": "yes"}), "sample_score.score.value.acc"),
    ("current", lambda r: r.update(index="7"), "index"),
    ("early", lambda r: r["choices"][0].pop("review"), "choices.0.review"),
    ("early", lambda r: r["choices"][0]["review"].update(result="ok"), "choices.0.review.result"),
    ("early", lambda r: r["choices"][0]["message"].update(content=["x"]), "choices.0.message.content"),
    ("early", lambda r: r.update(choices=[]), "choices"),
])
def test_bad_input_is_one_line_naming_file_line_and_field(tmp_path, capsys, source, edit, field):
    rows = _rows(DOUBAO if source == "current" else EARLY)
    edit(rows[1])
    path = tmp_path / "reviews" / "m" / "math_500_Level 3.jsonl"
    _put(path, rows)
    code, _, err = _run(capsys, "import", path, "--out", tmp_path / "run")
    assert code == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: {path}:2:{field}:"), err
    assert not (tmp_path / "run" / "samples.jsonl").exists()


def test_a_file_of_both_layouts_is_refused(tmp_path, capsys):
    path = tmp_path / "mixed.jsonl"
    _put(path, [_rows(DOUBAO)[0], _rows(EARLY)[0]])
    code, _, err = _run(capsys, "import", "--from", "evalscope", path, "--out", tmp_path / "run")
    assert code == 2 and "both evalscope layouts" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(("source", "field"), [("current", f) for f in ("index", "target", "input", "sample_score")]
                         + [("early", f) for f in ("choices", "raw_input", "origin_prompt")])
def test_any_json_value_in_any_field_is_imported_or_one_line_error(tmp_path, capsys, source, field):
    original = _rows(DOUBAO if source == "current" else EARLY)
    path = tmp_path / "reviews" / "m" / "x_default.jsonl"
    for i, value in enumerate(_JSON_VALUES):
        rows = [dict(row) for row in original]
        rows[0][field] = value
        _put(path, rows)
        code, _, err = _run(capsys, "import", "--from", "evalscope", path, "--out", tmp_path / f"run{i}")
        assert code in (0, 2), (value, err)
        if code == 2:
            assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: {path}"), (value, err)


def test_the_benchmark_is_the_file_name_before_its_subset(tmp_path):
    assert benchmark_name(DOUBAO) == "math_500"
    assert benchmark_name(EARLY) == "gsm8k"
    assert benchmark_name(Path("aime25_AIME2025-I.jsonl")) == "aime25"
    review = tmp_path / "reviews" / "m" / "general_qa_Privacy_And_Property.jsonl"  # a subset with underscores
    assert benchmark_name(review) == "general_qa_Privacy_And"  # no report to say where the subset starts
    (tmp_path / "reports" / "m").mkdir(parents=True)
    (tmp_path / "reports" / "m" / "general_qa.json").write_text("{}", encoding="utf-8")
    assert benchmark_name(review) == "general_qa"


def test_a_directory_of_one_review_file_is_imported(tmp_path, data_dir, capsys):
    root = tmp_path / "outputs"
    shutil.copytree(CURRENT, root)
    shutil.rmtree(root / "reviews" / "doubao-seed-1-6-251015")
    code, out, err = _run(capsys, "import", root, "--out", tmp_path / "run", "--data-dir", data_dir)
    assert code == 0, err
    assert len(read_samples(tmp_path / "run" / "samples.jsonl")) == 2  # the review, not its prediction file


def test_repeated_samples_of_one_problem_are_its_completions(tmp_path, capsys):
    """evalscope's repeats (``repeats`` > 1) write one review per sample, the problem's ``group_id`` on each."""
    first = _rows(DOUBAO)[0]
    second = json.loads(json.dumps(first))
    second["index"] = first["index"] + 1000
    second["sample_score"]["sample_id"] = second["index"]
    second["sample_score"]["score"]["prediction"] = "So the answer is \\boxed{7}."
    path = tmp_path / "reviews" / "m" / "x_default.jsonl"
    _put(path, [first, second])
    code, out, err = _run(capsys, "import", path, "--out", tmp_path / "run", "--benchmark", "label-only")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [(s.problem_id, s.sample_idx) for s in samples] == [(str(first["sample_score"]["group_id"]), 0),
                                                               (str(first["sample_score"]["group_id"]), 1)]


@pytest.mark.parametrize("model", ["qwen25-math-7b", "qwen25-14b-instruct"])
def test_qwen_math_minerva_excerpts_of_the_issue_34_hand_check_import_as_minerva(tmp_path, data_dir, capsys, model):
    """The Minerva lines of the issue 34 hand check (PROVENANCE.md): math_eval.py's minerva_math directory is
    the registry's minerva, every problem is found, and each verdict is the file's own ``score``."""
    path = REAL / model / "minerva_math" / "test_qwen25-math-cot_-1_seed0_t0.0_s0_e-1.jsonl"
    code, out, err = _run(capsys, "import", path, "--out", tmp_path / "run", "--data-dir", data_dir)
    assert code == 0, err
    rows = _rows(path)
    assert f"{len(rows)} of {len(rows)} source problems matched to the registry" in out, out
    samples = {s.problem_id: s for s in read_samples(tmp_path / "run" / "samples.jsonl")}
    assert {s.benchmark for s in samples.values()} == {"minerva"}
    assert {pid: s.extra["source_correct"] for pid, s in samples.items()} == {str(r["idx"]): r["score"][0]
                                                                              for r in rows}


EARLY_CONFIG = REAL / "evalscope-2025-01" / "20250117_154856" / "configs" / "task_config_46cf67.yaml"


def test_sampling_settings_come_from_the_output_directorys_task_config(tmp_path, capsys):
    """evalscope's own example: generation_config has do_sample false (greedy) beside temperature 1.0, so
    the temperature is unknown; top_p and max_new_tokens are recorded; the run's seed is not a sampling seed."""
    config = yaml.safe_load(EARLY_CONFIG.read_text(encoding="utf-8"))
    code, out, err = _run(capsys, "import", EARLY, "--out", tmp_path / "run")
    assert code == 0, err
    source = _config(tmp_path / "run")["source"]
    generation = config["generation_config"]
    assert generation["do_sample"] is False and generation["temperature"] == 1.0
    assert source["sampling"] == {"temperature": "unknown", "top_p": generation["top_p"],
                                  "max_tokens": generation["max_new_tokens"], "seed": "unknown"}
    assert source["details"]["run_seed"] == config["seed"] and "do_sample false" in out


@pytest.mark.parametrize("case", ["two configs", "bad yaml", "none"])
def test_without_one_readable_task_config_no_setting_is_claimed(tmp_path, capsys, case):
    root = tmp_path / "out"
    shutil.copytree(EARLY.parents[2], root)
    configs = root / "configs"
    if case == "two configs":
        shutil.copy(configs / EARLY_CONFIG.name, configs / "task_config_000000.yaml")
    elif case == "bad yaml":
        (configs / EARLY_CONFIG.name).write_text("generation_config: [unclosed\n", encoding="utf-8")
    else:
        shutil.rmtree(configs)
    code, out, err = _run(capsys, "import", root / EARLY.relative_to(EARLY.parents[2]), "--out", tmp_path / "run")
    assert code == 0, err
    sampling = _config(tmp_path / "run")["source"]["sampling"]
    assert set(sampling.values()) == {"unknown"}, sampling


def test_a_prediction_file_is_told_apart_from_its_review(tmp_path, capsys):
    code, _, err = _run(capsys, "import", DEEPSEEK_PREDICTIONS, "--out", tmp_path / "run")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "evalscope *prediction* file" in err and "under reviews/" in err, err


def test_a_prediction_file_of_another_run_lends_no_reasoning(tmp_path, data_dir, capsys):
    """A prediction line is the review's only when its answer text is the review's prediction."""
    def other_run(choice: dict) -> None:
        for part in choice["message"]["content"]:
            if part["type"] == "text":
                part["text"] += " (another run)"

    review = _with_predictions(tmp_path, other_run)
    code, out, err = _run(capsys, "import", review, "--out", tmp_path / "run", "--data-dir", data_dir)
    assert code == 0, err
    assert all(s.reasoning is None for s in read_samples(tmp_path / "run" / "samples.jsonl"))
