"""A run's diversity is computed one problem at a time (dsdr_eval.diversity_metrics.run.iter_problems):
the result does not depend on how graded.jsonl orders its lines, equals the result of each problem
computed on its own, and the memory held is a problem's, not the file's."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
from helpers.encoders import BagOfWordsEncoder  # deterministic and batch-independent

from dsdr_eval.diversity_metrics.run import compute_run_diversity
from dsdr_eval.rundir.jsonl import read_json, write_jsonl

N_PROBLEMS = 6
N_ROLLOUTS = 5


def rollout(problem: int, idx: int, words: int = 12) -> dict:
    rng = np.random.default_rng(problem * 1000 + idx)
    body = " ".join(f"w{int(v)}" for v in rng.integers(0, 9, size=words))
    answer = int(rng.integers(0, 3))
    return {"benchmark": "math500" if problem % 2 else "aime24", "problem_id": f"p{problem}", "sample_idx": idx,
            "phase": "sampling", "problem": f"Q{problem}", "gold": "1",
            "completion": f"{body} $x_{answer} = {answer}$ so \\boxed{{{answer}}}", "status":
            "correct" if answer == 1 else "incorrect", "correct": answer == 1, "answer_class": answer}


def grouped_rows(words: int = 12, n_problems: int = N_PROBLEMS) -> list[dict]:
    rows = []
    for p in range(n_problems):
        rows.append({**rollout(p, 0, words), "phase": "pass1", "completion": "PASS1 \\boxed{1}"})
        rows += [rollout(p, i, words) for i in range(N_ROLLOUTS)]
    return rows


def interleaved_rows() -> list[dict]:
    """The same lines as ``grouped_rows``, round-robin over problems (each problem still first appears in
    the same order) and each problem's rollouts in reverse: what concurrent engines append. The first
    problem's last rollout comes last, so every other problem is complete before it."""
    rows = [{**rollout(p, 0), "phase": "pass1", "completion": "PASS1 \\boxed{1}"} for p in range(N_PROBLEMS)]
    for i in reversed(range(N_ROLLOUTS)):
        rows += [rollout(p, i) for p in range(N_PROBLEMS)]
    rows.append(rows.pop(len(rows) - N_PROBLEMS))
    return rows


def diversity_files(run_dir: Path) -> tuple[bytes, bytes, dict]:
    compute_run_diversity(run_dir, encoder=BagOfWordsEncoder(), progress=False)
    metrics = read_json(run_dir / "metrics.json")
    return ((run_dir / "diversity_per_problem.jsonl").read_bytes(),
            (run_dir / "diversity_per_sample.jsonl").read_bytes(),
            {name: entry["diversity"] for name, entry in metrics["benchmarks"].items()})


def test_interleaved_file_gives_the_grouped_result(tmp_path):
    """Problems whose lines interleave wait until complete and come out in order of first appearance."""
    grouped, interleaved = tmp_path / "grouped", tmp_path / "interleaved"
    write_jsonl(grouped / "graded.jsonl", grouped_rows())
    write_jsonl(interleaved / "graded.jsonl", interleaved_rows())
    assert diversity_files(interleaved) == diversity_files(grouped)


def test_streamed_run_equals_each_problem_alone(tmp_path):
    """The reference is the all-at-once computation taken to its limit: every problem in a run
    directory of its own (nothing else in memory), its lines concatenated in the run's order."""
    whole = tmp_path / "whole"
    write_jsonl(whole / "graded.jsonl", interleaved_rows())
    per_problem, per_sample, _ = diversity_files(whole)
    expected_problems, expected_samples = b"", b""
    for p in range(N_PROBLEMS):
        alone = tmp_path / f"p{p}"
        write_jsonl(alone / "graded.jsonl", [r for r in grouped_rows() if r["problem_id"] == f"p{p}"])
        problem_lines, sample_lines, _ = diversity_files(alone)
        expected_problems += problem_lines
        expected_samples += sample_lines
    assert per_problem == expected_problems
    assert per_sample == expected_samples
    assert [json.loads(line)["problem_id"] for line in per_problem.splitlines()] == [f"p{p}" for p in range(N_PROBLEMS)]


def test_in_memory_records_give_the_file_result(tmp_path):
    """``dsdr-eval run`` hands its graded records over instead of the file being read back."""
    from dsdr_eval.rundir.samples import read_graded

    from_file, from_records = tmp_path / "file", tmp_path / "records"
    write_jsonl(from_file / "graded.jsonl", interleaved_rows())
    write_jsonl(from_records / "graded.jsonl", interleaved_rows())
    expected = diversity_files(from_file)
    records = read_graded(from_records / "graded.jsonl")
    compute_run_diversity(from_records, encoder=BagOfWordsEncoder(), progress=False, graded=records)
    assert (from_records / "diversity_per_sample.jsonl").read_bytes() == expected[1]
    assert (from_records / "diversity_per_problem.jsonl").read_bytes() == expected[0]


def peak_allocation(run_dir: Path) -> int:
    tracemalloc.start()
    try:
        compute_run_diversity(run_dir, encoder=BagOfWordsEncoder(), progress=False)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_held_is_one_problem_not_the_file(tmp_path):
    """Python's peak allocation during a run's diversity does not grow with the number of problems:
    four times the problems (and four times the file) peak within 25 % of the smaller run, since one
    problem's texts and n-grams are held at a time (reading the whole file, as before, grows with it)."""
    warm = tmp_path / "warm"  # the first call imports scipy / sacrebleu: not what is measured
    write_jsonl(warm / "graded.jsonl", grouped_rows())
    diversity_files(warm)
    small, large = tmp_path / "small", tmp_path / "large"
    write_jsonl(small / "graded.jsonl", grouped_rows(words=2000, n_problems=10))  # ~6 KB per completion
    write_jsonl(large / "graded.jsonl", grouped_rows(words=2000, n_problems=40))
    assert (large / "graded.jsonl").stat().st_size > 1_000_000
    small_peak, large_peak = peak_allocation(small), peak_allocation(large)
    assert large_peak < 1.25 * small_peak, (small_peak, large_peak)
