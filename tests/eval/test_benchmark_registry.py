"""Benchmark registry: local files, any-JSONL benchmarks, subsets, clear errors, offline hub."""

from __future__ import annotations

import json

import pytest

from dsdr_eval.tasks import (BENCHMARKS, Problem, hub_rows_to_problems, list_benchmarks, load_benchmark,
                                  normalise_hub_answer, _load_from_hub)
from dsdr_eval.errors import DsdrError

EXPECTED_COUNTS = {"aime24": 30, "aime25": 30, "math500": 500, "minerva": 272, "olympiadbench": 675, "amc23": 40}


def test_registry_names_and_hub_ids():
    assert list_benchmarks() == ["aime24", "aime25", "math500", "minerva", "olympiadbench", "amc23"]
    assert BENCHMARKS["math500"].hub_id == "HuggingFaceH4/MATH-500"
    for name, spec in BENCHMARKS.items():
        assert spec.local_file == f"{name}.jsonl" and spec.hub_id and spec.hub_split
        assert spec.n_problems == EXPECTED_COUNTS[name]


@pytest.mark.parametrize("name", list(EXPECTED_COUNTS))
def test_load_local_benchmarks(name, data_dir):
    problems = load_benchmark(name, data_dir=data_dir)
    assert len(problems) == EXPECTED_COUNTS[name]
    assert all(isinstance(p, Problem) and p.benchmark == name for p in problems)
    assert all(p.problem.strip() and p.answer.strip() and p.id for p in problems)
    assert len({p.id for p in problems}) == len(problems)
    assert "id" not in problems[0].extra and "answer" not in problems[0].extra


def test_env_var_data_dir(data_dir, monkeypatch):
    monkeypatch.setenv("DSDR_DATA_DIR", str(data_dir))
    problems = load_benchmark("aime25")
    assert problems[0].answer == "70" and problems[0].extra["source"] == "AIME 2025 I"


def test_limit_and_deterministic_subset(data_dir):
    everything = load_benchmark("math500", data_dir=data_dir)
    first = load_benchmark("math500", data_dir=data_dir, limit=5)
    assert [p.id for p in first] == [p.id for p in everything[:5]]
    a = load_benchmark("math500", data_dir=data_dir, limit=20, subset_seed=7)
    b = load_benchmark("math500", data_dir=data_dir, limit=20, subset_seed=7)
    c = load_benchmark("math500", data_dir=data_dir, limit=20, subset_seed=8)
    assert [p.id for p in a] == [p.id for p in b] and [p.id for p in a] != [p.id for p in c]
    order = {p.id: i for i, p in enumerate(everything)}
    assert [order[p.id] for p in a] == sorted(order[p.id] for p in a)  # kept in original order
    assert len(load_benchmark("aime24", data_dir=data_dir, limit=1000)) == 30
    with pytest.raises(DsdrError, match="limit"):
        load_benchmark("aime24", data_dir=data_dir, limit=0)


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_any_jsonl_path_is_a_benchmark(tmp_path):
    path = _write(tmp_path / "mine.jsonl", [json.dumps({"id": 1, "problem": "1+1?", "answer": 2, "topic": "x"}),
                                            json.dumps({"id": "b", "problem": "2+2?", "answer": "4"})])
    problems = load_benchmark(str(path))
    assert [(p.benchmark, p.id, p.answer) for p in problems] == [("mine", "1", "2"), ("mine", "b", "4")]
    assert problems[0].extra == {"topic": "x"}


def test_unknown_name_and_missing_file(tmp_path):
    with pytest.raises(DsdrError, match="unknown benchmark 'gsm9k'.*aime24"):
        load_benchmark("gsm9k")
    with pytest.raises(DsdrError, match="nope.jsonl: not found"):
        load_benchmark(str(tmp_path / "nope.jsonl"))


@pytest.mark.parametrize("bad_line, message", [
    ('{"id": "2", "problem": "p"', r"bad\.jsonl:2: invalid JSON"),
    ('{"id": "2", "problem": "p"}', r"bad\.jsonl:2: missing field 'answer'"),
    ('{"id": "2", "problem": "p", "answer": ""}', r"bad\.jsonl:2: field 'answer' is empty"),
    ('{"id": "2", "problem": "p", "answer": ["4"]}', r"bad\.jsonl:2: field 'answer' must be a string"),
    ('{"id": "1", "problem": "p", "answer": "4"}', r"bad\.jsonl:2: duplicate id '1' \(first on line 1\)"),
    ('[1, 2]', r"bad\.jsonl:2: expected a JSON object"),
])
def test_malformed_lines_name_file_and_line(tmp_path, bad_line, message):
    path = _write(tmp_path / "bad.jsonl", [json.dumps({"id": "1", "problem": "p", "answer": "3"}), bad_line])
    with pytest.raises(DsdrError, match=message):
        load_benchmark(str(path))


def test_offline_hub_fails_with_clear_message(tmp_path, monkeypatch):
    monkeypatch.delenv("DSDR_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DsdrError) as info:
        load_benchmark("aime24", data_dir=tmp_path)  # an empty data dir: falls through to the hub
    text = str(info.value)
    assert "math-ai/aime24" in text and "aime24.jsonl" in text and "--data-dir" in text


def test_hub_loader_errors_are_wrapped():
    def broken_loader(*args, **kwargs):
        raise ConnectionError("network is unreachable")

    with pytest.raises(DsdrError, match="HuggingFaceH4/MATH-500.*ConnectionError: network is unreachable"):
        _load_from_hub(BENCHMARKS["math500"], local_reason="test", loader=broken_loader)


def test_hub_field_mapping():
    # the column layouts the hub copies are documented to use (PROVENANCE.md)
    olympiad = hub_rows_to_problems(BENCHMARKS["olympiadbench"], [
        {"id": 2349, "question": "Find m, n.", "final_answer": ["$221,$8$"]},
        {"id": 7, "question": "Find x.", "final_answer": ["$\\frac{1}{2 n+2}$"]}])
    assert [(p.id, p.problem, p.answer) for p in olympiad] == [("2349", "Find m, n.", "221,$8"),
                                                                 ("7", "Find x.", "\\frac{1}{2 n+2}")]
    amc = hub_rows_to_problems(BENCHMARKS["amc23"], [{"id": 0, "question": "q", "answer": 27.0}])
    assert amc[0].answer == "27"
    aime = hub_rows_to_problems(BENCHMARKS["aime24"], [{"id": 60, "problem": "q", "solution": "... so \\boxed{204}."}])
    assert aime[0].answer == "204"
    math500 = hub_rows_to_problems(BENCHMARKS["math500"], [{"problem": "q", "answer": "x=5", "unique_id": "test/a/1.json"}])
    assert math500[0].id == "test/a/1.json" and math500[0].extra == {}
    with pytest.raises(DsdrError, match="no problem column"):
        hub_rows_to_problems(BENCHMARKS["minerva"], [{"text": "q", "answer": "1"}])
    assert normalise_hub_answer(["$69$,$84$"]) == "69$,$84"
    assert normalise_hub_answer(3) == "3" and normalise_hub_answer(" 5. ") == "5"
