"""`dsdr-eval import` and `score` on excerpts of real output files (tests/eval/real_files/PROVENANCE.md says
where each comes from): imported as a new user would, without --benchmark, then with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from dsdr_eval.cli import main
from dsdr_eval.importers.source import ProblemMatcher
from dsdr_eval.rundir.samples import read_samples

REAL = Path(__file__).resolve().parent / "real_files"
AIME25 = REAL / "lm-eval-aime25"
AIME25_SAMPLES = AIME25 / "samples_aime25_2026-03-06T23-50-06.435673.jsonl"
GSM8K = REAL / "lm-eval-gsm8k" / "samples_gsm8k_2026-04-03T02-02-47.394179.jsonl"
TORA_70B = REAL / "tora-70b" / "gsm8k" / "test_tora_-1_seed0_t0.0_s0_e1319.jsonl"


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _config(run: Path) -> dict:
    return json.loads((run / "config.json").read_text(encoding="utf-8"))


def _registry(data_dir: Path, name: str) -> dict[str, dict]:
    rows = [json.loads(line) for line in (data_dir / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]
    return {row["id"]: row for row in rows}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("with_benchmark", [False, True])
def test_lm_eval_aime25_retyped_problems_all_match_the_registry(tmp_path, data_dir, capsys, with_benchmark):
    """The data set's AIME 2025 differs from the registry's in wording, display math, Markdown and
    diagrams (before: 8 of the file's 30 matched; 1 of this excerpt's 5): each still finds its problem."""
    extra = ("--benchmark", "aime25", "--data-dir", data_dir) if with_benchmark else ()
    code, out, err = _run(capsys, "import", AIME25, "--out", tmp_path / "run", *extra)  # the directory, as users have
    assert code == 0, err
    assert "5 of 5 source problems matched to the registry, 0 unmatched (4 of them by similar text" in out, out
    assert "warning" not in err and "lm-eval 0.4.11" in out
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    registry = _registry(data_dir, "aime25")
    source = {str(row["doc_id"]): row for row in _lines(AIME25_SAMPLES)}
    assert sorted(s.problem_id for s in samples) == sorted(source)  # the file's own ids are the registry's
    for sample in samples:
        assert sample.gold == registry[sample.problem_id]["answer"] == source[sample.problem_id]["target"]
        assert sample.problem == registry[sample.problem_id]["problem"]
    overlap = _find(_config(tmp_path / "run"), "similar_text_overlap")
    assert set(overlap) == {"1", "22", "26", "29"} and min(overlap.values()) >= 0.6, overlap


def _find(value, key):
    """The first value of ``key`` anywhere in a JSON document."""
    if isinstance(value, dict):
        if key in value:
            return value[key]
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found = _find(item, key)
            if found is not None:
                return found
    return None


def test_a_retyped_problem_with_another_gold_is_not_taken_for_it(tmp_path, data_dir, capsys):
    """A similar text is a match only with the same gold: doc 29 given a wrong target stays unmatched."""
    work = tmp_path / "lm"
    shutil.copytree(AIME25, work)
    path = work / AIME25_SAMPLES.name
    rows = _lines(path)
    for row in rows:
        if row["doc_id"] == 29:
            row["target"] = "241"  # not the gold of any AIME 2025 problem
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    code, out, err = _run(capsys, "import", path, "--out", tmp_path / "run")
    assert code == 0, err
    assert "4 of 5 source problems matched to the registry, 1 unmatched" in out
    golds = {s.problem_id: s.gold for s in read_samples(tmp_path / "run" / "samples.jsonl")}
    assert golds["29"] == "241"  # the source's own id and gold, not the registry's problem 29 (240)


def _problem(pid: str, text: str, answer: str) -> SimpleNamespace:
    return SimpleNamespace(id=pid, problem=text, answer=answer, answer_meta=None, benchmark="b")


def test_similar_text_is_no_match_when_two_problems_come_as_close():
    base = "Find the number of ordered pairs of integers such that both lie between minus one hundred and one hundred"
    matcher = ProblemMatcher([_problem("a", base + " inclusive.", "117"), _problem("b", base + " exclusive.", "117")])
    assert matcher.similar(base + ", inclusive", "117") == (None, 0.0)  # a or b: ambiguous, neither
    matcher = ProblemMatcher([_problem("a", base + " inclusive.", "117"), _problem("b", "Another problem.", "117")])
    found, overlap = matcher.similar(base + ", inclusive", "117")
    assert found.id == "a" and overlap > 0.9


def test_a_registry_problem_is_matched_once(tmp_path, data_dir, capsys):
    """A retyped copy never takes a problem another line names exactly (the exact match comes first,
    wherever it stands in the file)."""
    work = tmp_path / "lm"
    work.mkdir()
    rows = {row["doc_id"]: row for row in _lines(AIME25_SAMPLES)}
    copy = json.loads(json.dumps(rows[0]))  # doc 0 matches exactly; a retyped doc 0 comes first with another id
    copy["doc_id"] = 100
    copy["doc"]["problem"] = copy["doc"]["problem"].replace("Find the sum", "Compute the sum")
    request = copy["arguments"]["gen_args_0"]
    request["arg_0"] = [request["arg_0"][0].replace("Find the sum", "Compute the sum")]
    path = work / AIME25_SAMPLES.name
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in (copy, rows[0])), encoding="utf-8")
    code, out, err = _run(capsys, "import", path, "--out", tmp_path / "run")
    assert code == 0, err
    assert "1 of 2 source problems matched to the registry, 1 unmatched" in out
    assert sorted(s.problem_id for s in read_samples(tmp_path / "run" / "samples.jsonl")) == ["0", "100"]


def test_lm_eval_chat_prompt_is_the_messages_not_their_json_encoded_again(tmp_path, capsys):
    code, _, err = _run(capsys, "import", AIME25_SAMPLES, "--out", tmp_path / "run")
    assert code == 0, err
    sample = read_samples(tmp_path / "run" / "samples.jsonl")[0]
    messages = json.loads(sample.prompt)
    assert messages[0]["role"] == "user" and messages[0]["content"].startswith("Question: Find the sum")


def test_lm_eval_aime25_scored_disagreements_are_the_tasks_whole_response_comparison(tmp_path, capsys):
    """Its task compares the whole response with the target (filter none): 0 % for the source; the
    completions that end 'Answer: 70' are correct for score, the empty ones no_answer."""
    assert _run(capsys, "import", AIME25_SAMPLES, "--out", tmp_path / "run")[0] == 0
    code, out, err = _run(capsys, "score", tmp_path / "run")
    assert code == 0, err
    graded = {row["problem_id"]: row for row in _lines(tmp_path / "run" / "graded.jsonl")}
    assert graded["0"]["correct"] is True and graded["0"]["extracted"] == "70"
    assert all(row["source_correct"] is False for row in graded.values())
    assert {graded[pid]["status"] for pid in ("1", "22", "29")} == {"no_answer"}


def test_lm_eval_gsm8k_real_file_gold_prompt_and_verdicts(tmp_path, capsys):
    code, out, err = _run(capsys, "import", GSM8K, "--out", tmp_path / "run")
    assert code == 0, err
    assert "as benchmark 'gsm8k'; 2 carry the source's verdict" in out and "answer extraction: gsm8k" in out
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [s.gold for s in samples] == ["18", "3"]  # the value after '####', not the rationale
    assert samples[0].prompt.endswith("How much in dollars does she make every day at the farmers' market?\nAnswer:")
    assert samples[0].temperature == 0.0
    code, out, err = _run(capsys, "score", tmp_path / "run")
    assert code == 0, err
    assert "agreement with the source's grader: 2/2 (100.0%)" in out


def test_tora_real_file_settings_no_verdict_and_the_tool_output_profile(tmp_path, capsys):
    code, out, err = _run(capsys, "import", TORA_70B.parent.parent, "--out", tmp_path / "run")  # its output dir
    assert code == 0, err
    assert "as benchmark 'gsm8k'; the source file has no verdict field" in out
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert {(s.temperature, s.seed) for s in samples} == {(0.0, 0)}
    assert {s.problem_id: s.gold for s in samples} == {"0": "18", "2": "70000", "98": "5", "288": "3", "760": "16"}
    config = _config(tmp_path / "run")
    source = config["source"]
    assert source["verdict_field"] is None and source["details"]["prompt_type"] == "tora"
    assert config["extraction"] == "tool-output"


@pytest.mark.parametrize("fixture, expected", [
    # ToRA-70B: 98, 288, 760 end in prose whose last number is not the program's printed output
    (TORA_70B, {"0": True, "2": True, "98": True, "288": True, "760": True}),
    # ToRA-Code-34B idx 659: the program prints 0.0 (ToRA's pred '0', wrong); the prose's last number equals the gold
    (REAL / "tora-code-34b" / "gsm8k" / "test_tora_-1_seed0_t0.0_s0_e1319.jsonl", {"0": True, "659": False}),
])
def test_tora_files_are_graded_from_the_last_program_output(tmp_path, capsys, fixture, expected):
    code, out, err = _run(capsys, "import", fixture.parent.parent, "--out", tmp_path / "run")
    assert code == 0, err
    code, out, err = _run(capsys, "score", tmp_path / "run")
    assert code == 0, err
    graded = {row["problem_id"]: row for row in _lines(tmp_path / "run" / "graded.jsonl")}
    assert {pid: row["correct"] for pid, row in graded.items()} == expected
    assert {graded[pid]["extraction"] for pid in expected if pid not in ("0", "2")} == {"program_output"}


def test_a_program_only_prompt_type_reads_the_program_output_alone(tmp_path, capsys):
    directory = tmp_path / "out" / "gsm8k"
    directory.mkdir(parents=True)
    shutil.copy(TORA_70B, directory / "test_program_only_-1_seed0_t0.0_s0_e1319.jsonl")
    code, out, err = _run(capsys, "import", directory.parent, "--out", tmp_path / "run")
    assert code == 0, err
    assert _config(tmp_path / "run")["extraction"] == "program-output"


def test_a_chain_of_thought_prompt_type_has_no_program_output_note(tmp_path, capsys):
    directory = tmp_path / "out" / "gsm8k"
    directory.mkdir(parents=True)
    shutil.copy(TORA_70B, directory / "test_qwen25-math-cot_-1_seed0_t0.0_s0_e1319.jsonl")
    code, out, err = _run(capsys, "import", directory.parent, "--out", tmp_path / "run")
    assert code == 0, err
    assert _config(tmp_path / "run")["extraction"] == "flexible"


def test_a_directory_of_cot_and_tora_files_is_graded_with_tool_output(tmp_path, capsys):
    for data_set, prompt_type in (("gsm8k", "tora"), ("gsm8k_cot", "qwen25-math-cot")):
        (tmp_path / "out" / data_set).mkdir(parents=True)
        shutil.copy(TORA_70B, tmp_path / "out" / data_set / f"test_{prompt_type}_-1_seed0_t0.0_s0_e1319.jsonl")
    code, out, err = _run(capsys, "import", tmp_path / "out", "--out", tmp_path / "run")
    assert code == 0, err  # flexible + tool-output: tool-output reads cot completions as flexible does
    assert _config(tmp_path / "run")["extraction"] == "tool-output"


def test_similar_text_needs_most_words_in_common_more_without_a_gold():
    text = "Let N be the number of subsets of sixteen chairs arranged in a row such that no person sits next to two others"
    matcher = ProblemMatcher([_problem("a", text + ".", "907")])
    assert matcher.similar("Find the remainder when 2025 is divided by seven hundred.", "907") == (None, 0.0)
    half = " ".join(text.split()[:17]) + " and the rest is another problem, with other words"
    assert matcher.similar(half, "907")[0] is not None  # ~0.6-0.85 of the words and the same gold: the same problem
    assert ProblemMatcher([_problem("a", text + ".", "907")]).similar(half, None) == (None, 0.0)  # no gold: 85 %
    assert ProblemMatcher([_problem("a", text + ".", "907")]).similar(text + " exactly.", None)[0].id == "a"


QWEN_MATH_7B_MINERVA = REAL / "qwen25-math-7b" / "minerva_math" / "test_qwen25-math-cot_-1_seed0_t0.0_s0_e-1.jsonl"


def test_an_equation_gold_is_not_answered_by_one_of_its_sides_on_a_real_file(tmp_path, capsys):
    # Qwen2.5-Math-7B on Minerva 119 repeats the question; the flexible profile extracts its last math
    # span, 'f', the right side of the gold m dv/dt + bv = f. math-verify alone read the gold as an
    # assignment and graded it correct (rule equation_gold).
    code, out, err = _run(capsys, "import", QWEN_MATH_7B_MINERVA, "--out", tmp_path / "run")
    assert code == 0, err
    code, out, err = _run(capsys, "score", tmp_path / "run")
    assert code == 0, err
    graded = {row["problem_id"]: row for row in _lines(tmp_path / "run" / "graded.jsonl")}
    assert graded["119"]["extracted"] == "f" and graded["119"]["correct"] is False
    # 71: \frac{\sinh(at)}{a} for the gold \frac{1}{2a}(\exp{a*t} - \exp{-a*t}) (rule hyperbolic)
    assert graded["71"]["correct"] is True
