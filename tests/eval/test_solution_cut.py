"""Issue 42: diversity measures solutions, not the text written after their final answer.

Each rule is checked against plain expectations written here (where the answer statement ends, what
the cut keeps), and bites on a named mutant:
- "cut ignored": run.rollout_solution / scoring.solutions keep the whole text -> the synthetic groups
  and the trainer test fail;
- "cut at the first box when the grader took the last" -> test_the_cut_follows_the_graded_answer fails;
- "span allowed to cross the answer" (formula.extract_formulas ignores ends_at_answer) ->
  test_a_dropped_dollar_measures_like_the_honest_solution fails;
- "an extractor without an end" -> test_every_extractor_says_where_its_answer_ends fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from dsdr_eval.diversity_metrics.formula import formula_set
from dsdr_eval.diversity_metrics.run import compute_run_diversity, rollout_solution, rollout_text
from dsdr_eval.grading.solution import solution_text
from dsdr_eval.grading import extract_rows, grade_samples
from dsdr_eval.grading.extraction import EXTRACTORS
from dsdr_eval.rundir.jsonl import read_json, write_jsonl
from dsdr_eval.rundir.samples import parse_graded
from helpers.encoders import BagOfWordsEncoder as _BagOfWords


def BagOfWordsEncoder() -> _BagOfWords:  # noqa: N802 - reads like the class it builds
    return _BagOfWords(64)


# extractor -> (text, where its answer statement ends: the text before the marker "|")
STATEMENTS = {
    "boxed": "We get $x=3$, so \\boxed{3}| Question: next one",
    "answer_line": "Adding gives three.\nAnswer: $3$| and now I will invent a dialogue",
    "minerva": "Final Answer: The final answer is $3$. I hope it is correct| User: more",
    "gsm8k": "3 apples.\n#### 3| Question: How many",
    "answer_tag": "<think>so 3</think><answer>3</answer>| <answer>junk",
    "last_math": "so the value is $3$| then",
    "program_output": "```python\nprint(3)\n```\n```output\n3\n```| extra",
    "last_number": "we add 1 and 2 to get 3| then so on",
}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_every_extractor_says_where_its_answer_ends(name):
    marked = STATEMENTS[name]
    text, expected_end = marked.replace("|", ""), marked.index("|")
    found = EXTRACTORS[name](text)
    assert found is not None and found.answer is not None
    assert found.end == expected_end, (name, text[:found.end])


def test_every_extractor_has_a_statement_case():
    # a new extractor must say where its answer ends (else the cut keeps what follows its answer)
    assert set(STATEMENTS) == set(EXTRACTORS)


def _graded(completion: str, **row) -> dict:
    [out] = extract_rows([{"problem_id": "p", "gold": "3", "completion": completion, **row}])
    return out


def test_the_cut_follows_the_graded_answer():
    # the grader reads the LAST box; the solution ends there, not at the first box
    text = "First try \\boxed{2}. No wait, $1+2$ is \\boxed{3}. Question: what is 5+5? \\boxed"
    row = _graded(text)
    assert row["extracted"] == "3"
    assert text[:row["answer_end"]].endswith("is \\boxed{3}")
    # a thinking model: offsets are in the completion, the answer part starts after </think>
    think = "<think>maybe \\boxed{9}</think>So \\boxed{3} and then <|im_start|>user more"
    row = _graded(think)
    assert think[:row["answer_end"]].endswith("So \\boxed{3}")


def _record(completion: str, **row) -> object:
    graded = _graded(completion, **row)
    graded.update(status="correct", correct=True, answer_class=0)
    return parse_graded(graded, "test")[0]


def test_each_text_part_stops_at_the_answer():
    completion = "<think>plan</think>So \\boxed{3} runaway text"
    record = _record(completion)
    assert rollout_text(record, "answer") == "So \\boxed{3}"
    assert rollout_text(record, "whole") == "<think>plan</think>So \\boxed{3}"
    assert rollout_text(record, "reasoning") == "<think>plan</think>"
    assert rollout_text(record, "answer", cut="none") == "So \\boxed{3} runaway text"
    # a reasoning field kept apart precedes the completion: never cut
    record = _record("So \\boxed{3} runaway", reasoning="long thought")
    assert rollout_text(record, "whole") == "long thought\nSo \\boxed{3}"
    # no extracted answer: the text is kept
    record = _record("I do not know, it keeps going")
    assert rollout_text(record, "answer") == "I do not know, it keeps going"


def test_solution_text_with_spans_independent_of_the_grader():
    # plain offsets: answer part [10, 30), the answer ends at 20
    completion = "R" * 10 + "A" * 10 + "T" * 10 + "X" * 5
    cut = solution_text(completion, None, (10, 30), 20, "answer")
    assert (cut.text, cut.removed, cut.ends_at_answer) == ("A" * 10, "T" * 10, True)
    cut = solution_text(completion, None, (10, 30), 20, "reasoning")
    assert cut.text == "R" * 10 and cut.removed == "X" * 5
    cut = solution_text(completion, None, (10, 30), 20, "whole")
    assert cut.text == "R" * 10 + "A" * 10 and cut.removed == "T" * 10 + "X" * 5


def test_a_dropped_dollar_measures_like_the_honest_solution():
    honest = "We sum: $1+2=\\boxed{3}$. Then $y_1$ appears"
    dropped = "We sum: $1+2=\\boxed{3}. Then $y_1$ appears"
    sets = []
    for text in (honest, dropped):
        row = _graded(text)
        cut = text[:row["answer_end"]]
        sets.append(formula_set(cut, ends_at_answer=True))
    assert sets[0] == sets[1] == frozenset({"1+2="})
    # the box outside the math: the dropped $ before it measures like the honest closing $
    for closed, unclosed in (("so $3 + 9 = 12$. \\boxed{12}", "so $3 + 9 = 12. \\boxed{12}"),
                             ("$x=1$ and $y = 2$, \\boxed{3} more", "$x=1$ and $y = 2, \\boxed{3} more")):
        cut = [t[:_graded(t)["answer_end"]] for t in (closed, unclosed)]
        assert formula_set(cut[0], ends_at_answer=True) == formula_set(cut[1], ends_at_answer=True), cut
    # the span never crosses the answer: what it swallowed before (the whole-text rule) is not a formula
    assert "1+2=\\boxed{3}.Then" in formula_set(dropped)
    # a lone currency $ separated by a blank line stays prose
    assert formula_set("costs $5\n\nso \\boxed{3}", ends_at_answer=True) == frozenset()


GROUP = 8


def _synthetic_run(tmp_path: Path, kind: str) -> Path:
    """6 problems x 8 rollouts: the same solution in every rollout, followed by what ``kind`` says."""
    rows = []
    for p in range(6):
        for i in range(GROUP):
            tail = {"same": "",
                    "tail": f" Question {p}-{i}: what is $q_{{{p}{i}}}$? invent word{i} token{p * 10 + i}",
                    "dollar": f" so n={p}{i}$ word{i}"}[kind]
            solution = ("We compute $a+b=7$ so \\boxed{7}" if kind != "dollar"
                        else "We compute $a+b=\\boxed{7}")
            rows.append({"benchmark": "toy", "problem_id": f"p{p}", "sample_idx": i, "phase": "sampling",
                         "gold": "7", "completion": solution + tail, "finish_reason": "length"})
    graded = grade_samples(rows, progress=False, workers=1)
    run = tmp_path / kind
    run.mkdir()
    write_jsonl(run / "graded.jsonl", graded)
    return run


@pytest.mark.parametrize("kind", ["same", "tail", "dollar"])
def test_text_after_the_answer_is_not_diversity(tmp_path, kind):
    run = _synthetic_run(tmp_path, kind)
    cut = compute_run_diversity(run, encoder=BagOfWordsEncoder(), progress=False)["toy"]
    for subset in ("all", "correct"):
        assert cut[subset]["d_emb"] == pytest.approx(0.0, abs=1e-12)
        assert cut[subset]["d_eq"] == 0.0
        assert cut[subset]["vendi_embedding"]["1"] == pytest.approx(1.0, abs=1e-6)
    whole = compute_run_diversity(run, encoder=BagOfWordsEncoder(), progress=False, cut="none")["toy"]
    validity = cut["validity"]
    if kind == "same":
        assert whole["all"]["d_emb"] == pytest.approx(0.0, abs=1e-12) and validity["solution_cut"]["n_cut"] == 0
        return
    # the old rule counted the unique tails (and the dollar-swallowed tail) as diversity
    assert whole["all"]["d_emb"] > 0.01 and whole["all"]["d_eq"] > 0.3
    assert validity["solution_cut"]["n_cut"] == 48 and validity["long_after_answer"]["n"] == 48
    assert validity["token_cap"]["share"] == 1.0
    assert any("token cap" in w for w in validity["warnings"])
    assert any("after their final answer" in w for w in validity["warnings"])
    recorded = read_json(run / "metrics.json")["benchmarks"]["toy"]["diversity"]
    assert recorded["settings"]["solution_cut"]["rule"] == "none"  # the last computation is what is recorded


def test_the_trainers_bonus_is_not_bought_by_text_after_the_answer():
    from dsdr_train import scoring
    from dsdr_train.rollout import RolloutBatch

    honest = ["We compute $a+b=7$ so \\boxed{7}"] * 4
    hack = [f"We compute $a+b=\\boxed{{7}} so n={i}$ word{i} z{i}" for i in range(4)]
    runaway = [f"We compute $a+b=7$ so \\boxed{{7}} Question {i}: $q_{i}$ word{i}" for i in range(4)]
    bonus = {}
    for name, texts in (("honest", honest), ("hack", hack), ("runaway", runaway)):
        batch = RolloutBatch(texts=texts, group_ids=[0] * 4)
        graded = extract_rows({"problem_id": "p", "gold": "7", "completion": t} for t in texts)
        bonus[name] = scoring.group_diversity(batch, graded, BagOfWordsEncoder(), "extended", "answer-end")
        if name != "honest":
            uncut = scoring.group_diversity(batch, graded, BagOfWordsEncoder(), "extended", "none")
            assert uncut[1].mean() >= 0.5 and uncut[2].mean() > 0.25  # the old rule paid for it
    for name in ("hack", "runaway"):
        for k in range(3):  # d_emb, d_eq, d: no more than the honest group's (all zero)
            assert np.all(bonus[name][k] <= bonus["honest"][k] + 1e-12), (name, k)


def _scored_runaway_run(tmp_path: Path) -> Path:
    from dsdr_eval.cli import main as cli

    rows = [{"benchmark": "toy", "problem_id": f"p{p}", "sample_idx": i, "gold": "7", "finish_reason": "length",
             # the solution's equation without delimiters (D_eq reads none): the without-formula warning
             "completion": f"We compute a+b=7 so \\boxed{{7}} Question {p}-{i}: $q_{{{p}{i}}}$ word{i}"}
            for p in range(3) for i in range(4)]
    write_jsonl(tmp_path / "in.jsonl", rows)
    assert cli(["score", str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "runs" / "run"), "--no-progress"]) == 0
    compute_run_diversity(tmp_path / "runs" / "run", encoder=BagOfWordsEncoder(), progress=False)
    return tmp_path / "runs" / "run"


def test_the_report_and_the_dashboard_show_what_the_numbers_measured(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from dsdr_eval.cli import main as cli

    run = _scored_runaway_run(tmp_path)
    assert cli(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    readme = (tmp_path / "report" / "README.md").read_text()
    assert "solution cut answer-end" in readme
    assert "100% of rollouts hit the token cap" in readme and "long text after their final answer" in readme
    monkeypatch.setenv("DSDR_RUNS_DIR", str(run.parent))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "dashboards" / "app.py"), default_timeout=60)
    at.query_params["page"] = "evaluation"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    warnings = [str(w.value) for w in at.warning]
    assert any("hit the token cap" in w for w in warnings) and any("after their final answer" in w for w in warnings)
    # a warning that quotes delimiters is shown as written: every $ escaped, never rendered as math
    quoting = [w for w in warnings if "no formula the extractor reads" in w]
    assert len(quoting) == 1 and "\\$..\\$" in quoting[0] and not re.search(r"(?<!\\)\$", quoting[0])
    assert "no formula the extractor reads (\\$..\\$" in readme
    # the hack watch table (issue 47): every validity share of the run, the cut's and the dropped $'s
    watch = [f.value for f in at.dataframe if "unbalanced_dollar" in f.value.columns]
    assert len(watch) == 1 and watch[0]["token_cap"].tolist() == [1.0] and watch[0]["cut"].tolist() == [1.0]
    assert watch[0]["unbalanced_dollar"].tolist() == [0.0] and watch[0]["without_formula"].tolist() == [1.0]


# (completion, holds a formula D_eq reads): a dropped closing $, a bare equation, an escaped \$ and
# a $ in the text after the answer (cut away: not the solution's)
HACK_WATCH_ROLLOUTS = (
    ("$3 \\times 4 = 12$. \\boxed{12}", True),
    ("3 x 4 = 12. \\boxed{12}", False),
    ("$3 \\times 4 = 12. \\boxed{12}", True),
    ("It costs \\$12, so \\boxed{12}", False),
    ("$4+4+4=12$ so \\boxed{12} and then $tail", True),
)


def _unescaped_dollars_reference(text: str) -> int:
    """Plain code from the definition: a $ not preceded by a backslash."""
    return sum(1 for i, ch in enumerate(text) if ch == "$" and (i == 0 or text[i - 1] != "\\"))


def test_the_validity_line_counts_dropped_dollars_and_solutions_without_formula(tmp_path):
    """Issue 47's hack watch in every run's validity line. Mutants: the $ count on the uncut text (the
    tail's $ counted), an escaped \\$ counted, solutions without formula not counted -> this fails."""
    rows = [{"benchmark": "toy", "problem_id": f"p{p}", "sample_idx": i, "phase": "sampling", "gold": "12",
             "completion": text, "finish_reason": "stop"}
            for p in range(2) for i, (text, _) in enumerate(HACK_WATCH_ROLLOUTS)]
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "graded.jsonl", grade_samples(rows, progress=False, workers=1))
    validity = compute_run_diversity(run, encoder=BagOfWordsEncoder(), progress=False)["toy"]["validity"]
    solutions = [text[:text.index("\\boxed{12}") + len("\\boxed{12}")] for text, _ in HACK_WATCH_ROLLOUTS]
    odd = sum(_unescaped_dollars_reference(t) % 2 for t in solutions) / len(solutions)
    bare = sum(not has for _, has in HACK_WATCH_ROLLOUTS) / len(HACK_WATCH_ROLLOUTS)
    assert odd == 0.2 and bare == 0.4  # the reference itself: one dropped $, two without formula
    assert validity["unbalanced_dollar"] == {"n": 2, "share": pytest.approx(odd)}
    assert validity["without_formula"] == {"n": 4, "share": pytest.approx(bare)}
    assert any("unbalanced $" in w for w in validity["warnings"])
    assert any("no formula the extractor reads" in w and "40%" in w for w in validity["warnings"])


def test_a_tail_of_closing_delimiters_is_not_counted_as_cut():
    from dsdr_eval.diversity_metrics.validity import ValidityCounter

    counter = ValidityCounter("answer-end")
    for completion in ("We get $$1+2=\\boxed{3}.$$", "So \\[ x = \\boxed{3} \\]", "\\boxed{3} Question: 1+1?"):
        record = _record(completion)
        counter.add_rollout("b", record, rollout_solution(record, "answer"))
    summary = counter.summary("b")["solution_cut"]
    assert summary["n_cut"] == 1 and 0 < summary["chars_removed_share"] < 1


REAL = Path(__file__).resolve().parent / "real_files" / "nemo-skills-2025-08"


def test_a_real_runaway_into_an_invented_question_is_cut(tmp_path):
    # NeMo-Skills' own test outputs (real generations, 3 seeds): one rollout boxes its answer, then
    # writes "Question: ... My solution: ..." to its token limit (tests/eval/real_files/PROVENANCE.md)
    from dsdr_eval.cli import main as cli
    from dsdr_eval.rundir.samples import read_graded

    run = tmp_path / "run"
    assert cli(["import", str(REAL), "--from", "nemo-skills", "--benchmark", "math", "--out", str(run)]) == 0
    assert cli(["score", str(run), "--no-progress"]) == 0
    runaway = [r for r in read_graded(run / "graded.jsonl") if "\n\nQuestion:" in r.sample.completion]
    assert runaway
    for record in runaway:
        # the solution ends at the answer the grader read: here the invented question's own box, the
        # last one (the audit flags such a rollout: several different final answers)
        text = rollout_text(record, "answer")
        assert text.endswith("\\boxed{" + record.extracted + "}"), text[-80:]
        assert rollout_text(record, "answer", cut="none").startswith(text)
    result = compute_run_diversity(run, encoder=BagOfWordsEncoder(), progress=False)["math"]
    assert result["validity"]["solution_cut"]["n_cut"] >= 1
