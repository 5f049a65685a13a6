"""`dsdr-eval import` of NeMo-Skills outputs (``eval-results/<benchmark>/output-rs<seed>.jsonl``): real seed files
(tests/eval/real_files/PROVENANCE.md), and lines built from NeMo-Skills' writer where no real file was found
(a thinking model's ``reasoning_content`` / ``_full_generation``, a judge's ``judgement``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dsdr_eval.cli import main
from dsdr_eval.rundir.samples import read_samples

REAL = Path(__file__).resolve().parent / "real_files"
NS_2025 = REAL / "nemo-skills-2025-08"
NS_2024 = REAL / "nemo-skills-2024-08"


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _config(run: Path) -> dict:
    return json.loads((run / "config.json").read_text(encoding="utf-8"))


def _layout(tmp_path: Path, source: Path, benchmark: str, seeds: dict[int, int] | None = None) -> Path:
    """``source``'s seed files copied to ``tmp_path/ns/eval-results/<benchmark>/`` (``seeds``: new seed -> old)."""
    directory = tmp_path / "ns" / "eval-results" / benchmark
    directory.mkdir(parents=True)
    for new, old in (seeds or {s: s for s in range(3)}).items():
        shutil.copy(source / f"output-rs{old}.jsonl", directory / f"output-rs{new}.jsonl")
    return directory


def test_real_seed_files_become_one_run_with_a_sample_per_seed(tmp_path, capsys):
    """Mutants: ``symbolic_correct`` or ``predicted_answer`` not kept (``"correct": None``,
    ``"extracted": None``): fails."""
    run = tmp_path / "run"
    code, out, err = _run(capsys, "import", NS_2025, "--out", run)  # --from auto, a directory of seed files
    assert code == 0, err
    samples = read_samples(run / "samples.jsonl")
    files = {seed: _lines(NS_2025 / f"output-rs{seed}.jsonl") for seed in range(3)}
    assert len(samples) == 21 and "imported 21 completions of 7 problems from nemo-skills" in out
    # problem by problem (the file's order), one sample per seed file, sample_idx and seed = the file's seed
    assert [(s.problem_id, s.sample_idx, s.seed) for s in samples] == [
        (row["id"], seed, seed) for i, row in enumerate(files[0]) for seed in range(3)]
    for sample in samples:
        row = files[sample.sample_idx][[r["id"] for r in files[0]].index(sample.problem_id)]
        assert sample.completion == row["generation"] and sample.gold == row["expected_answer"]
        assert sample.problem == row["problem"]
        assert sample.extra["source_correct"] is row["symbolic_correct"]
        assert sample.extra.get("source_extracted") == row["predicted_answer"]  # None: nothing extracted
    config = _config(run)
    assert config["source"]["tool"] == "nemo-skills" and config["source"]["verdict_field"] == "symbolic_correct"
    assert [f["seed"] for f in config["source"]["details"]["files"]] == [0, 1, 2]
    assert config["extraction"] == "boxed" and config["protocol"]["phases"][0]["n"] == 3
    assert config["benchmarks"][0]["name"] == "default"  # not under eval-results/: the layout names none
    assert any("--benchmark names it" in note for note in config["source"]["notes"])


def test_real_files_scored_agree_with_symbolic_correct_but_the_hand_checked_cases(tmp_path, capsys):
    """PROVENANCE.md: on the whole files dsdr and ``symbolic_correct`` differ on 5 of 150, each hand-checked;
    the excerpt holds 4 of them. Any other difference is a regression (of the import or of the grader)."""
    run = tmp_path / "run"
    assert _run(capsys, "import", NS_2025, "--out", run)[0] == 0
    code, out, err = _run(capsys, "score", run, "--bootstrap", "0", "--no-progress")
    assert code == 0, err
    agreement = json.loads((run / "metrics.json").read_text())["provenance"]["source_agreement"]
    assert agreement["n_compared"] == 21
    differ = {(item["key"][2], item["key"][3]) for item in agreement["disagreements"]}
    checked = {("train/prealgebra/737.json", 0), ("train/algebra/2027.json", 0), ("train/algebra/635.json", 2),
               ("train/number_theory/7086.json", 1)}
    assert differ <= checked and agreement["n_agree"] >= 21 - len(checked)


def test_benchmark_from_the_eval_results_layout_and_a_file_alone(tmp_path, capsys):
    """``eval-results/<benchmark>/``: the benchmark's name; one file imported alone (``--from auto``: detected by its
    keys) keeps its seed as sample_idx. Mutants: ``benchmark_name`` returning None; ``sample_idx=()`` in
    ``_record`` or write ignoring a record's sample_idx (sample 0); the signature removed from detect (the file
    alone is refused): each fails."""
    directory = _layout(tmp_path, NS_2025, "mathtrain")
    assert _run(capsys, "import", tmp_path / "ns", "--out", tmp_path / "all")[0] == 0  # the whole output directory
    assert {s.benchmark for s in read_samples(tmp_path / "all" / "samples.jsonl")} == {"mathtrain"}
    code, _, err = _run(capsys, "import", directory / "output-rs1.jsonl", "--out", tmp_path / "one")
    assert code == 0, err
    one = read_samples(tmp_path / "one" / "samples.jsonl")
    assert len(one) == 7 and {(s.benchmark, s.sample_idx, s.seed) for s in one} == {("mathtrain", 1, 1)}
    code, _, err = _run(capsys, "import", directory, "--out", tmp_path / "named", "--benchmark", "mine")
    assert code == 0, err
    assert {s.benchmark for s in read_samples(tmp_path / "named" / "samples.jsonl")} == {"mine"}


def test_seed_order_is_numeric_and_gaps_are_kept(tmp_path, capsys):
    """Seeds 0, 2, 10: sample_idx 0, 2, 10 in that order (not output-rs10 before output-rs2), each from its file.
    Mutant: files sorted by name: fails."""
    directory = _layout(tmp_path, NS_2025, "mathtrain", {0: 0, 2: 1, 10: 2})
    assert _run(capsys, "import", directory, "--out", tmp_path / "run")[0] == 0
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [s.sample_idx for s in samples[:3]] == [0, 2, 10]
    first = {seed: _lines(directory / f"output-rs{seed}.jsonl")[0]["generation"] for seed in (0, 2, 10)}
    assert [s.completion for s in samples[:3]] == [first[0], first[2], first[10]]


def test_the_2024_release_is_correct_and_question_are_read(tmp_path, capsys):
    """NeMo-Skills before October 2024 wrote ``is_correct`` and ``question`` (no ``id``): detected, verdicts
    kept, problems numbered by their line. Mutant: ``VERDICT_FIELDS = ("symbolic_correct",)``: no verdicts."""
    code, out, err = _run(capsys, "import", NS_2024, "--out", tmp_path / "run")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    files = {seed: _lines(NS_2024 / f"output-rs{seed}.jsonl") for seed in range(3)}
    assert [(s.problem_id, s.sample_idx) for s in samples] == [(str(i), seed) for i in range(4) for seed in range(3)]
    assert [s.extra["source_correct"] for s in samples] == [files[s.sample_idx][int(s.problem_id)]["is_correct"]
                                                           for s in samples]
    assert samples[0].problem == files[0][0]["question"]
    assert _config(tmp_path / "run")["source"]["verdict_field"] == "is_correct"


def _thinking_lines() -> list[dict]:
    """Lines as NeMo-Skills writes them for a thinking model (built from its writer, no real file found):
    ``parse_reasoning`` (``_full_generation``; an unfinished thought leaves ``generation`` empty), a server's
    ``reasoning_content`` with its token counts, and a judged line."""
    base = {"problem": "What is $2+3$?", "expected_answer": "5", "num_input_tokens": 30}
    return [
        {**base, "generation": "So the answer is $\\boxed{5}$.",
         "_full_generation": "<think>\nMaybe \\boxed{6}? No: 2+3=5.\n</think>\n\nSo the answer is $\\boxed{5}$.",
         "_generation_finished_thinking": True, "num_generated_tokens": 41, "finish_reason": "stop",
         "predicted_answer": "5", "symbolic_correct": True,
         "judgement": "The answers match. Judgement: no wait. Judgement: Yes"},
        {**base, "problem": "What is $2+4$?", "expected_answer": "6", "generation": "",
         "_full_generation": "<think>\nadding... it is \\boxed{6} unless", "_generation_finished_thinking": False,
         "num_generated_tokens": 512, "finish_reason": "length", "predicted_answer": None, "symbolic_correct": False,
         "judgement": "Judgement: No"},
        {**base, "problem": "What is $3+4$?", "expected_answer": "7", "generation": "It is \\boxed{7}.",
         "reasoning_content": "3+4 is \\boxed{8}? no, 7", "num_generated_tokens": 30, "num_reasoning_tokens": 22,
         "finish_reason": "stop", "predicted_answer": "7", "symbolic_correct": True,
         "judgement": "Reasoning: fine, though the format is odd."},
        {**base, "problem": "What is $3+5$?", "expected_answer": "8", "generation": "It is \\boxed{8}.",
         "reasoning_content": "<think>3+5=8", "num_generated_tokens": 30, "num_reasoning_tokens": 0,
         "predicted_answer": "8", "symbolic_correct": True},
    ]


def _write(directory: Path, rows: list[dict], seed: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"output-rs{seed}.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_thinking_model_lines_keep_reasoning_tokens_finish_and_the_judge(tmp_path, capsys):
    """Mutants: reasoning = the whole ``_full_generation`` (answer included); the judge read at the first
    "Judgement:" (line 1); ``num_generated_tokens`` not kept; a 0 reasoning count kept beside a thought (line 4);
    write not adding ``source_labels``: each fails."""
    directory = tmp_path / "eval-results" / "toy"
    _write(directory, _thinking_lines())
    code, out, err = _run(capsys, "import", directory, "--out", tmp_path / "run")
    assert code == 0, err
    s = read_samples(tmp_path / "run" / "samples.jsonl")
    assert s[0].completion == "So the answer is $\\boxed{5}$."
    assert s[0].reasoning == "<think>\nMaybe \\boxed{6}? No: 2+3=5.\n</think>\n\n"
    assert s[1].completion == "" and s[1].reasoning == "<think>\nadding... it is \\boxed{6} unless"
    assert s[2].reasoning == "3+4 is \\boxed{8}? no, 7" and s[2].n_reasoning_tokens == 22
    assert s[3].reasoning == "<think>3+5=8" and s[3].n_reasoning_tokens is None
    assert [x.n_completion_tokens for x in s] == [41, 512, 30, 30] and {x.n_prompt_tokens for x in s} == {30}
    assert [x.finish_reason for x in s] == ["stop", "length", "stop", None]
    # NeMo-Skills' reading of a judgement: the text after the LAST "Judgement:" starts with yes; else false
    assert [x.extra.get("source_judge_correct") for x in s] == [True, False, False, None]
    assert s[0].extra["source_judgement"].endswith("Judgement: Yes")
    code, _, err = _run(capsys, "score", tmp_path / "run", "--bootstrap", "0", "--no-progress")
    assert code == 0, err
    graded = _lines(tmp_path / "run" / "graded.jsonl")
    # the unfinished thought's box is not an answer; the kept thought's wrong box is never graded
    assert [(g["status"], g["reasoning_state"]) for g in graded[:3]] == [
        ("correct", "closed"), ("truncated", "unclosed"), ("correct", "closed")]


@pytest.mark.parametrize("mutate, expected", [
    (lambda rows: rows[0].update(symbolic_correct="yes"), "output-rs1.jsonl:1:symbolic_correct: must be true/false"),
    (lambda rows: rows[1].update(generation=["a", "b"]), "output-rs1.jsonl:2:generation: must be a string"),
    (lambda rows: rows[0].pop("generation"), "output-rs1.jsonl:1:generation: missing required field"),
    (lambda rows: rows[2].update(num_generated_tokens=-3), "output-rs1.jsonl:3:num_generated_tokens: must be a"),
    (lambda rows: rows[0].update(judgement=1), "output-rs1.jsonl:1:judgement: must be a string"),
    (lambda rows: rows[0].update(finish_reason=7), "output-rs1.jsonl:1:finish_reason: must be a string"),
    (lambda rows: rows[2].update(problem="another"), "output-rs1.jsonl:3:problem: differs from line 3 of "
                                                     "output-rs0.jsonl"),
    (lambda rows: rows[1].update(expected_answer="9"), "output-rs1.jsonl:2:expected_answer: differs from line 2"),
    (lambda rows: rows.pop(), "output-rs1.jsonl: 3 lines, output-rs0.jsonl 4"),
    (lambda rows: rows[0].update(_full_generation="other text"), "output-rs1.jsonl:1:_full_generation: does not "
                                                                 "end with the generation"),
])
def test_bad_seed_files_name_file_line_field_and_exit_2(tmp_path, capsys, mutate, expected):
    """Each wrong field or misaligned seed file: one line naming the file, line and field; exit 2; nothing written.
    Mutant: ``_check_aligned`` not called: the two ``differs`` cases import silently (the short file: a traceback)."""
    directory = tmp_path / "eval-results" / "toy"
    _write(directory, _thinking_lines(), seed=0)
    rows = _thinking_lines()
    mutate(rows)
    _write(directory, rows, seed=1)
    code, out, err = _run(capsys, "import", directory, "--out", tmp_path / "run")
    assert code == 2 and expected in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "run" / "samples.jsonl").exists()


def test_greedy_output_is_detected_and_left_out_beside_seed_files(tmp_path, capsys):
    """``output.jsonl`` (greedy) alone is sample 0; beside seed files it is left out with a note (another protocol).
    Mutant: ``seed_files`` taking both: 3 samples per problem, fails."""
    directory = tmp_path / "eval-results" / "toy"
    directory.mkdir(parents=True)
    greedy = directory / "output.jsonl"
    greedy.write_text("".join(json.dumps(row) + "\n" for row in _thinking_lines()), encoding="utf-8")
    assert _run(capsys, "import", directory, "--out", tmp_path / "greedy")[0] == 0
    samples = read_samples(tmp_path / "greedy" / "samples.jsonl")
    assert {(s.sample_idx, s.seed) for s in samples} == {(0, None)} and len(samples) == 4
    _write(directory, _thinking_lines(), seed=0)
    _write(directory, _thinking_lines(), seed=1)
    code, out, err = _run(capsys, "import", tmp_path / "eval-results", "--out", tmp_path / "seeds")
    assert code == 0, err
    assert len(read_samples(tmp_path / "seeds" / "samples.jsonl")) == 8 and "output.jsonl (a greedy" in out


def test_the_trimmed_real_test_file_without_generations_is_refused(tmp_path, capsys):
    """NeMo-Skills' metric test data keeps no ``generation`` (first line of
    tests/data/eval_outputs/eval-results/hendrycks_math/output-rs0.jsonl-test, commit 0b012df8): detected by
    name in a directory, refused with one line."""
    directory = tmp_path / "eval-results" / "hendrycks_math"
    directory.mkdir(parents=True)
    (directory / "output-rs0.jsonl").write_text(json.dumps(
        {"num_generated_tokens": 3492, "generation_start_time": 1752883422.5023587,
         "generation_end_time": 1752883460.060215, "predicted_answer": "70", "symbolic_correct": True,
         "reward_model_score": 0.9999997126314468, "subset_for_metrics": "aime25"}) + "\n", encoding="utf-8")
    code, _, err = _run(capsys, "import", directory, "--out", tmp_path / "run")
    assert code == 2 and "output-rs0.jsonl:1:generation: missing required field 'generation'" in err


@pytest.mark.parametrize("directory, registered", [("math-500", "math500"), ("minerva_math", "minerva"),
                                                   ("aime24", "aime24")])
def test_nemo_skills_benchmark_names_stand_for_the_registry(tmp_path, data_dir, capsys, directory, registered):
    """NeMo-Skills' data set directories (``math-500``; ``minerva_math``, prepared from Qwen2.5-Math's data: the
    registry's ``minerva``) are matched to the registered benchmark by problem text, taking its ids.
    Mutant: no ``nemo-skills`` entry in write's tool names: minerva_math is not matched."""
    rows = [json.loads(line) for line in (data_dir / f"{registered}.jsonl").read_text().splitlines()[:3]]
    lines = [{"id": f"{directory}-{i}", "problem": row["problem"], "expected_answer": row["answer"],
              "generation": f"So \\boxed{{{row['answer']}}}.", "predicted_answer": row["answer"],
              "symbolic_correct": True} for i, row in enumerate(rows)]
    path = tmp_path / "ns" / "eval-results" / directory
    for seed in range(2):
        _write(path, lines, seed)
    code, out, err = _run(capsys, "import", tmp_path / "ns", "--out", tmp_path / "run")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert {s.benchmark for s in samples} == {registered}
    assert [s.problem_id for s in samples] == [row["id"] for row in rows for _ in range(2)]
    assert [s.extra["source_id"] for s in samples[::2]] == [line["id"] for line in lines]
    assert "3 of 3 source problems matched" in out
