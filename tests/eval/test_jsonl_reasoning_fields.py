"""A user's own JSONL: `import --from jsonl` with `--reasoning-field` / `--finish-reason-field` (list-valued, one item
per completion), and `reasoning_content` read wherever `reasoning` is (`import` and `score`'s samples input),
as `--help` and the provenance text say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsdr_eval.cli import main
from dsdr_eval.rundir.samples import read_samples


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# one line per problem, four responses each, as a server's n=4 sampling is saved: finish reasons and thoughts as
# lists aligned with the responses (null: not recorded), the third response cut by the token limit
ROWS = [
    {"uid": "p1", "ref": "5", "responses": ["so \\boxed{5}", "hence \\boxed{4}", "the sum is 2+3=", "\\boxed{5}"],
     "stops": ["stop", "stop", "length", None], "thoughts": ["2+3 is 5", "2+3=4?", "2+3", None]},
    {"uid": "p2", "ref": "7", "responses": "it is \\boxed{7}", "stops": "stop", "thoughts": "3+4"},
]


def test_list_valued_finish_reasons_and_reasoning_follow_their_responses(tmp_path, capsys):
    """Item i of each list belongs to response i. Mutants: the lists read reversed, or item 0 for every
    response: fails; the finish reason not passed on: the length-cut response is not `truncated`."""
    source = _write(tmp_path / "mine.jsonl", ROWS)
    run = tmp_path / "run"
    code, out, err = _run(capsys, "import", "--from", "jsonl", source, "--out", run, "--id-field", "uid",
                          "--gold-field", "ref", "--completion-field", "responses", "--finish-reason-field", "stops",
                          "--reasoning-field", "thoughts")
    assert code == 0, err
    samples = read_samples(run / "samples.jsonl")
    assert [(s.problem_id, s.sample_idx, s.completion, s.finish_reason, s.reasoning) for s in samples] == [
        ("p1", i, c, f, r) for i, (c, f, r) in enumerate(zip(ROWS[0]["responses"], ROWS[0]["stops"],
                                                               ROWS[0]["thoughts"]))] + [
        ("p2", 0, "it is \\boxed{7}", "stop", "3+4")]
    assert "reasoning of 4 completions from thoughts" in out and "finish reason of 4 completions from stops" in out
    assert _run(capsys, "score", run, "--bootstrap", "0", "--no-progress")[0] == 0
    graded = _lines(run / "graded.jsonl")
    assert [g["status"] for g in graded] == ["correct", "incorrect", "truncated", "correct", "correct"]
    assert graded[0]["reasoning"] == "2+3 is 5" and graded[0]["reasoning_state"] == "closed"


@pytest.mark.parametrize("field, value, expected", [
    ("stops", ["stop", "stop"], "mine.jsonl:1:stops: must be a list of 4 (a string or null), one per completion "
                                "(got 2 items)"),
    ("stops", "stop", "mine.jsonl:1:stops: must be a list of 4 (a string or null), one per completion (got string)"),
    ("thoughts", ["a", "b", 3, None], "mine.jsonl:1:thoughts.2: must be a string or null (got number)"),
    ("thoughts", {"text": "a"}, "mine.jsonl:1:thoughts: must be a list of 4"),
])
def test_misaligned_lists_name_file_line_field_and_exit_2(tmp_path, capsys, field, value, expected):
    """A list of another length than the responses', one value for several responses, a wrong item: one line
    naming the field, exit 2, nothing written. Mutant: zip() without the length check: imports silently."""
    rows = [dict(ROWS[0], **{field: value}), ROWS[1]]
    source = _write(tmp_path / "mine.jsonl", rows)
    code, _, err = _run(capsys, "import", "--from", "jsonl", source, "--out", tmp_path / "run", "--id-field", "uid",
                        "--gold-field", "ref", "--completion-field", "responses", "--finish-reason-field", "stops",
                        "--reasoning-field", "thoughts")
    assert code == 2 and expected in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run" / "samples.jsonl").exists()


def test_import_reads_reasoning_content_and_finish_reason_by_default(tmp_path, capsys):
    """No field options: a line's `reasoning`, else its `reasoning_content`, and its `finish_reason` are read.
    Mutant: ``REASONING_FIELDS = ("reasoning",)``: the second line's thought is lost."""
    source = _write(tmp_path / "server.jsonl", [
        {"id": 1, "answer": "5", "completion": "\\boxed{5}", "reasoning": "thought A", "finish_reason": "stop"},
        {"id": 2, "answer": "6", "completion": "\\boxed{6}", "reasoning_content": "thought B"},
        {"id": 3, "answer": "7", "completion": "\\boxed{7}", "reasoning": "kept", "reasoning_content": "other"},
    ])
    code, _, err = _run(capsys, "import", "--from", "jsonl", source, "--out", tmp_path / "run")
    assert code == 0, err
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [(s.reasoning, s.finish_reason) for s in samples] == [("thought A", "stop"), ("thought B", None),
                                                                 ("kept", None)]


def test_score_reads_reasoning_content_as_reasoning(tmp_path, capsys):
    """`score FILE` on a server's output kept as is: `reasoning_content` is the reasoning (kept apart, not graded,
    written back once as `reasoning`); with both fields `reasoning` wins and the other is carried as read.
    Mutant: the alias line removed from ``parse_sample``: the thought is lost and the empty answer of line 2
    reads as no reasoning at all instead of an unclosed one."""
    source = _write(tmp_path / "mine.jsonl", [
        {"problem_id": "1", "gold": "5", "completion": "The answer is 5.", "reasoning_content": "maybe \\boxed{3}"},
        {"problem_id": "2", "gold": "6", "completion": "", "reasoning_content": "so far \\boxed{6} but", },
        {"problem_id": "3", "gold": "7", "completion": "The answer is 7.", "reasoning": "r", "reasoning_content": "rc"},
    ])
    code, _, err = _run(capsys, "score", source, "--out", tmp_path / "scored", "--bootstrap", "0", "--no-progress")
    assert code == 0, err
    graded = _lines(tmp_path / "scored" / "graded.jsonl")
    assert [(g.get("reasoning"), g["reasoning_state"], g["status"]) for g in graded] == [
        ("maybe \\boxed{3}", "closed", "correct"), ("so far \\boxed{6} but", "unclosed", "truncated"),
        ("r", "closed", "correct")]
    assert "reasoning_content" not in graded[0] and graded[2]["reasoning_content"] == "rc"


def test_score_refuses_a_reasoning_content_that_is_not_text(tmp_path, capsys):
    source = _write(tmp_path / "mine.jsonl", [{"problem_id": "1", "gold": "5", "completion": "5",
                                              "reasoning_content": ["a"]}])
    code, _, err = _run(capsys, "score", source, "--out", tmp_path / "scored", "--no-progress")
    assert code == 2 and "mine.jsonl:1:reasoning_content: must be a string or null" in err, err


def test_import_help_lists_every_format_and_the_new_fields(capsys):
    """`import --help` names evalscope and nemo-skills, and the two field options."""
    with pytest.raises(SystemExit):
        main(["import", "--help"])
    text = "".join(capsys.readouterr().out.split())  # argparse wraps lines, at hyphens too
    for needle in ("evalscope (a review file", "nemo-skills (eval-results/<benchmark>/output-rs<seed>.jsonl",
                   "--reasoning-field", "--finish-reason-field", "reasoning_content"):
        assert "".join(needle.split()) in text
