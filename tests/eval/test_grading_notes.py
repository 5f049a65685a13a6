"""What grading records about its time budget: grader provenance and the note of a timeout (issue 21 follow-up)."""

from __future__ import annotations

from types import SimpleNamespace

from dsdr_eval.grading import grader_provenance
from dsdr_eval.grading.grade import _finish_problem
from dsdr_eval.grading.task import CLASS_BUDGET_TIMEOUTS


def test_provenance_says_the_timeout_is_per_answer_with_a_class_budget():
    provenance = grader_provenance(5.0, 1)
    scope = provenance["timeout_scope"]
    assert scope.startswith("per answer") and "comparison with the gold" in scope and "class comparisons" in scope
    assert provenance["class_budget_timeouts"] == CLASS_BUDGET_TIMEOUTS == 4.0
    assert f"{CLASS_BUDGET_TIMEOUTS:g} x grading_timeout_s" in scope
    assert "CPU time" in scope and "never wall time" in scope  # issue 43: a budget the load cannot spend
    assert provenance["gold_parse_limit_s"] >= 30.0  # the gold: its own bound, outside the answers' budget


def test_a_timeout_without_a_worker_note_says_the_answer_budget_was_spent():
    # A worker's verdict "timeout" with no note comes from the per-answer budget timer (math-verify's
    # own alarms are switched off in the workers): the note names the budget, not math-verify's timeout.
    job = SimpleNamespace(answers=["x", "y"], status=["timeout", "timeout"], class_ref=[None, None],
                          notes=[None, "an answer's grading call used more than 2 s of CPU time; worker killed"])
    rows = [{"extracted": "x", "status": None, "grade_note": None},
            {"extracted": "y", "status": None, "grade_note": None}]
    _finish_problem(rows, job, 2.0)
    assert rows[0]["grade_note"] == ("timeout: the answer's grading budget (2 s of CPU time for its parse and its "
                                     "comparison with the gold together) was spent (answer counted as not correct)")
    # a worker's own note is kept
    assert rows[1]["grade_note"] == "an answer's grading call used more than 2 s of CPU time; worker killed"
    assert [row["correct"] for row in rows] == [False, False]
