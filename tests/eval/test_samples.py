"""dsdr_eval.rundir.samples: the one sample schema, read and validated once, written back unchanged."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from dsdr_eval.run.generate import PlannedRequest, new_sample
from dsdr_eval.run.resume import open_samples
from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.samples import (DEFAULT_BENCHMARK, SAMPLING, SampleKey, SamplesFile, as_graded, read_graded,
                               read_samples)


def _write(path, rows, *, blank_lines: bool = False):
    sep = "\n\n" if blank_lines else "\n"
    path.write_text(sep.join(json.dumps(r) for r in rows) + "\n")


def test_a_file_read_and_written_back_keeps_its_shape(tmp_path):
    runner_line = {"benchmark": "math500", "problem_id": "p", "sample_idx": 0, "phase": "pass1", "problem": "Q",
                   "gold": "3", "answer_meta": None, "prompt": "P", "completion": "\\boxed{3}",
                   "finish_reason": "stop", "n_prompt_tokens": 5, "n_completion_tokens": 7, "temperature": 0.1,
                   "top_p": 0.9, "max_tokens": 16, "seed": 1}
    user_line = {"problem_id": "q", "gold": "2", "completion": "x", "my_field": {"a": [1]}, "benchmark": None}
    path = tmp_path / "s.jsonl"
    _write(path, [runner_line, user_line])
    first, second = read_samples(path)
    assert list(first.to_json().items()) == list(runner_line.items())  # same fields, same order
    # nothing invented for a hand-written line: no nulls added, a null benchmark stays unwritten;
    # only the defaults that every reader applies (phase, sample_idx) are written
    assert second.to_json() == {"problem_id": "q", "sample_idx": 0, "phase": SAMPLING, "gold": "2",
                                "completion": "x", "my_field": {"a": [1]}}
    assert second.key == SampleKey(DEFAULT_BENCHMARK, SAMPLING, "q", 0) == (DEFAULT_BENCHMARK, SAMPLING, "q", 0)
    assert (first.line, second.line) == (1, 2)


def test_graded_records_carry_their_line_numbers(tmp_path):
    rows = [{"problem_id": "p", "sample_idx": i, "gold": "1", "completion": "c", "status": "correct",
             "correct": True, "answer_class": 0} for i in range(3)]
    path = tmp_path / "graded.jsonl"
    _write(path, rows, blank_lines=True)
    assert [r.line for r in read_graded(path)] == [1, 3, 5]
    rows[1]["correct"] = "yes"
    _write(path, rows, blank_lines=True)
    with pytest.raises(DsdrError, match=r"graded\.jsonl:3:correct: must be true or false"):
        read_graded(path)
    with pytest.raises(DsdrError, match=r"graded row:1:status: missing field 'status'"):
        as_graded([{"problem_id": "p", "gold": "1", "completion": "c", "correct": True}])


def test_the_resume_reader_validates_like_score(tmp_path):
    """A bad line used to pass the resume check (only the key was read) and stop the run after
    generation, at scoring; now the one reader refuses it before an engine starts."""
    path = tmp_path / "samples.jsonl"
    _write(path, [{"benchmark": "b", "problem_id": "p", "sample_idx": 0, "gold": "1", "completion": "c"},
                  {"benchmark": "b", "problem_id": "p", "sample_idx": 1, "gold": "2", "completion": "c"}])
    with pytest.raises(DsdrError, match=r"samples\.jsonl:2:gold: '2' differs from '1'"):
        open_samples(path).keys


def test_generated_text_is_cleaned_like_read_text(tmp_path):
    """One text cleaner: a lone surrogate in a generated completion becomes U+FFFD (it used to be
    '?', while the reader made it U+FFFD), so a sample reads back as it was generated."""
    from dsdr_eval.backends.base import Completion, GenerationRequest
    from dsdr_eval.protocols import Phase

    planned = PlannedRequest("b", SimpleNamespace(id="p", problem="q", answer="1"),
                                    Phase(SAMPLING, 1, 0.7, 0.9), 0,
                                    GenerationRequest("prompt \udfff", "q", 1, 0.7, 0.9, 8, 5))
    sample = new_sample(planned, 0, Completion("a\ud800b", "stop", 3, 4, None))
    assert (sample.completion, sample.prompt) == ("a\ufffdb", "prompt \ufffd")
    samples = SamplesFile.open(tmp_path / "samples.jsonl", missing_ok=True)
    samples.append([sample])
    [back] = read_samples(tmp_path / "samples.jsonl")
    assert back == sample and back.line == samples.samples[0].line == 1


def test_records_stream_with_the_file_checks(tmp_path):
    """One record at a time (the dashboard may stop at a display limit), checked as read_graded checks."""
    from dsdr_eval.rundir.samples import iter_records, parse_graded

    rows = [{"problem_id": 7, "gold": "1", "completion": "c", "status": "correct", "correct": True, "mine": [1]},
            {"problem_id": 7, "gold": "1", "completion": "d", "status": "incorrect", "correct": False},
            {"problem_id": 7, "gold": "2", "completion": "e", "status": "incorrect", "correct": False}]
    path = tmp_path / "graded.jsonl"
    _write(path, rows)
    records = iter_records(path, parse_graded)
    first, second = next(records), next(records)  # the bad third line is not reached yet
    assert first.sample.extra == {"mine": [1]} and (first.line, second.line) == (1, 2)
    assert first.key == SampleKey(DEFAULT_BENCHMARK, SAMPLING, "7", 0)  # schema defaults, integer id as text
    assert second.key == (DEFAULT_BENCHMARK, SAMPLING, "7", 1)
    with pytest.raises(DsdrError, match=r"graded\.jsonl:3:gold: '2' differs from '1'"):
        list(iter_records(path, parse_graded))  # read to the end: the same checks as read_graded
    _write(path, rows[:2])
    path.write_text(path.read_text() + '{"problem_id": 7, "gold"')  # a run still being written
    notes: list[str] = []
    warnings: list[str] = []
    assert len(list(iter_records(path, parse_graded, on_warning=warnings.append, on_partial_tail=notes.append))) == 2
    assert len(notes) == 1 and "graded.jsonl:3: skipped a partial last line" in notes[0] and not warnings


def test_parse_key_reads_the_key_as_the_sample_reader_does():
    from dsdr_eval.rundir.samples import parse_key

    assert parse_key({"problem_id": 3, "sample_idx": 2}, "d.jsonl:1") == SampleKey(DEFAULT_BENCHMARK, SAMPLING, "3", 2)
    assert parse_key({"benchmark": "aime24", "phase": "pass1", "problem_id": "p", "sample_idx": 0}, "f:1") == (
        "aime24", "pass1", "p", 0)
    for row, message in (({"problem_id": "p"}, r"f:4:sample_idx: missing required field"),
                         ({"problem_id": "p", "sample_idx": -1}, r"f:4:sample_idx: must be a non-negative integer"),
                         ({"problem_id": "p", "sample_idx": 0, "phase": "train"}, r"f:4:phase: must be one of"),
                         ({"problem_id": "", "sample_idx": 0}, r"f:4:problem_id: empty problem id"),
                         ({"problem_id": "p", "sample_idx": 0, "benchmark": 3}, r"f:4:benchmark: must be")):
        with pytest.raises(DsdrError, match=message):
            parse_key(row, "f:4")
