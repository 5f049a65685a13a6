"""Answer extraction, math-verify equivalence, answer classes, hostile completions, timeouts."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from dsdr_eval.errors import DsdrError
from dsdr_eval.grading import (MAX_ANSWER_CHARS, answer_key, extract_answer, extract_answer_with_method,
                               grade_samples, status_counts)


# --- extraction (pure, fast) ----------------------------------------------------------------

@pytest.mark.parametrize("text, expected, method", [
    (r"so $\boxed{\frac{a}{b}}$.", r"\frac{a}{b}", "boxed"),
    (r"first \boxed{1} then \boxed{2}", "2", "boxed"),
    (r"$\boxed 5$ done", "5", "boxed"),
    (r"\fbox{x+1}", "x+1", "fbox"),
    (r"\boxed{\{1,2\}}", r"\{1,2\}", "boxed"),
    (r"\boxed{\left\{ x \right.}", r"\left\{ x \right.", "boxed"),
    (r"\boxed {7}", "7", "boxed"),
    (r"\boxed{3} and a truncated \boxed{4", "3", "boxed"),  # unclosed last box: the previous one
    (r"\boxed{3} then an empty \boxed{}", "3", "boxed"),
    (r"put it in \boxed{}.", None, None),  # an echoed instruction is not an answer
    ("The answer is 12.\n", "12", "answer_is"),
    ("blah\nFinal answer: $x^2$ (I think)", "x^2", "answer_line"),
    ("**Answer:** 42", "42", "answer_line"),
    ("The final answer is $\\frac{1}{3}$. I hope it is correct.", "\\frac{1}{3}", "answer_is"),
    ("Answer: 1\nwait, recheck.\nAnswer: 2", "2", "answer_line"),
    (r"\boxedfoo{3}", None, None),
    ("I do not know.", None, None),
    ("", None, None),
])
def test_extraction(text, expected, method):
    result = extract_answer_with_method(text)
    assert (result.answer, result.method) == (expected, method)
    assert extract_answer(text) == expected


def test_extraction_is_linear_on_hostile_text():
    huge = "step " * 400_000 + r"\boxed{" + "{" * 100_000 + "}" * 100_000 + "}"
    start = time.process_time()
    answer = extract_answer(huge)
    assert answer == "{" * 100_000 + "}" * 100_000
    unclosed = r"\boxed{" * 50_000 + "x"  # 50k unclosed boxes: must not be quadratic
    assert extract_answer(unclosed) is None
    assert time.process_time() - start < 10  # CPU time: the load cannot spend it (issue 43); quadratic would be hours


def test_answer_key_normalises_cheap_differences():
    assert answer_key(r"\left( 3, \dfrac{\pi}{2} \right)") == answer_key(r"(3,\frac{\pi}{2})")
    assert answer_key("90^\\circ") == answer_key("90") and answer_key("5.") == "5"


# --- grading through the worker pool ----------------------------------------------------------

PWNED = Path(f"/tmp/dsdr_pwned_{uuid.uuid4().hex}")
CASES = [  # (problem_id, gold, completion, expected status)
    ("half", r"\frac{1}{2}", r"So $\boxed{0.5}$.", "correct"),
    ("half", r"\frac{1}{2}", r"\boxed{\frac{1}{2}}", "correct"),
    ("half", r"\frac{1}{2}", "Answer: 1/2", "correct"),
    ("half", r"\frac{1}{2}", r"\boxed{\frac{1}{3}}", "incorrect"),
    ("half", r"\frac{1}{2}", "no idea", "no_answer"),
    ("polar", r"\left( 3, \frac{\pi}{2} \right)", r"\boxed{(3,\pi/2)}", "correct"),
    ("polar", r"\left( 3, \frac{\pi}{2} \right)", r"\boxed{(3, \pi)}", "incorrect"),
    ("root", r"3\sqrt{13}", r"\boxed{\sqrt{117}}", "correct"),
    ("deg", r"90^\circ", r"\boxed{90}", "correct"),
    ("set", "3, 5, 7", r"\boxed{7, 5, 3}", "correct"),
    ("six", "6", r"\boxed{7}", "incorrect"),
    ("six", "6", r"\boxed{6.0}", "correct"),
    ("six", "6", r"\boxed{8}", "incorrect"),
    ("six", "6", r"\boxed{16/2}", "incorrect"),
    ("six", "6", r"\boxed{8.0}", "incorrect"),
    ("six", "6", r"\boxed{7}", "incorrect"),
    # hostile completions: graded as not correct, never executed, no crash or hang
    ("hostile", "5", r"\boxed{__import__('os').system('touch " + str(PWNED) + r"')}", "incorrect"),
    ("hostile", "5", r"\boxed{exec(\"open('" + str(PWNED) + r"','w')\")}", "incorrect"),
    ("hostile", "5", "x" * 3_000_000 + r" \boxed{4}", "incorrect"),
    ("hostile", "5", r"\boxed{" + "{" * 100_000 + "1" + "}" * 100_000 + "}", "incorrect"),
    ("hostile", "5", r"\boxed{" + "{" * 100_000 + "1", "no_answer"),
    ("hostile", "5", r"\boxed{" + "{" * 300 + "5" + "}" * 300 + "}", None),  # deep but short: any status
    ("hostile", "5", r"\boxed{9^{9^{9^{9}}}}", None),  # timeout or incorrect, never correct
    ("hostile", "5", r"\boxed{5}", "correct"),  # the pool still works after all of the above
]


@pytest.fixture(scope="module")
def graded():
    rows = [{"benchmark": "t", "problem_id": pid, "gold": gold, "completion": text, "sample_idx": i}
            for i, (pid, gold, text, _) in enumerate(CASES)]
    return grade_samples(rows, grading_timeout_s=5.0, workers=2, progress=False)


def test_statuses_and_equivalences(graded):
    for row, (pid, gold, text, expected) in zip(graded, CASES):
        assert row["status"] in ("correct", "incorrect", "no_answer", "timeout", "error")
        assert row["correct"] == (row["status"] == "correct")
        if expected is not None:
            assert row["status"] == expected, (pid, text[:80], row["extracted"], row["grade_note"])
        else:
            assert row["status"] != "correct"


def test_hostile_inputs_execute_nothing(graded):
    assert not PWNED.exists()
    long_row = next(r for r in graded if r["extracted"] and r["extracted"].startswith("{" * 50))
    assert len(long_row["extracted"]) == MAX_ANSWER_CHARS and "not verified" in long_row["grade_note"]


def test_answer_classes(graded):
    six = [r for r in graded if r["problem_id"] == "six"]
    classes = [r["answer_class"] for r in six]  # 7, 6.0, 8, 16/2, 8.0, 7
    assert classes[0] == 0 and classes[1] == 1  # numbered by first appearance
    assert classes[5] == classes[0]  # identical wrong answers
    assert classes[2] == classes[3] == classes[4]  # 8 == 16/2 == 8.0 by math-verify
    assert len(set(classes)) == 3
    half = [r for r in graded if r["problem_id"] == "half"]
    assert half[0]["answer_class"] == half[1]["answer_class"] == half[2]["answer_class"]  # all correct
    assert half[3]["answer_class"] != half[0]["answer_class"] and half[4]["answer_class"] is None


def test_status_counts(graded):
    counts = status_counts(graded)
    assert sum(counts.values()) == len(CASES)
    assert counts["no_answer"] == 2 and counts["correct"] == 9


def test_external_kill_of_a_hung_worker():
    # With a 0.5 s budget the parent kills the worker stuck in 9!!!!!!! (C code: the worker's own
    # timer cannot interrupt it) and the rest of the problem is still graded on a fresh worker.
    rows = [{"problem_id": "p", "gold": "5", "completion": c}
            for c in (r"\boxed{9!!!!!!!}", r"\boxed{5}", r"\boxed{6}", r"\boxed{5.0}")]
    rows.append({"problem_id": "q", "gold": "7", "completion": r"\boxed{7}"})
    out = grade_samples(rows, grading_timeout_s=0.5, workers=1, progress=False)
    assert [r["status"] for r in out] == ["timeout", "correct", "incorrect", "correct", "correct"]
    # What matters is that the kill came from the worker's CPU clock at the 0.5 s limit, not from the
    # wall-clock backstop (>= 60 s) -- not how many wall seconds a loaded 2-core machine took (this
    # bound failed 1 of 3 CI runs at 60.7 s of 60, issue 43).
    assert out[0]["grade_note"] == "an answer's grading call used more than 0.5 s of CPU time; worker killed"
    assert out[1]["answer_class"] == out[3]["answer_class"] != out[2]["answer_class"]


def test_input_errors():
    with pytest.raises(DsdrError, match="missing field 'completion'"):
        grade_samples([{"problem_id": "a", "gold": "1"}], progress=False)
    with pytest.raises(DsdrError, match="conflicting gold"):
        grade_samples([{"problem_id": "a", "gold": "1", "completion": ""},
                       {"problem_id": "a", "gold": "2", "completion": ""}], progress=False)
    out = grade_samples([{"problem_id": "a", "gold": "1", "completion": "nothing"},
                         {"problem_id": "a", "gold": "1", "completion": 3}], progress=False)  # no math-verify call
    assert [r["status"] for r in out] == ["no_answer", "error"] and [r["answer_class"] for r in out] == [None, None]


def test_persistent_pool_reused_across_calls():
    from dsdr_eval.grading import GradingPool

    rows = [{"problem_id": "p", "gold": "4", "completion": c} for c in (r"\boxed{4}", r"\boxed{5}", "none")]
    with GradingPool(grading_timeout_s=5.0, workers=1) as pool:
        pids = [w.proc.pid for w in pool.worker_pool.workers]
        first = grade_samples(rows, pool=pool, progress=False)
        second = grade_samples(rows[::-1], pool=pool, progress=False)
        assert [w.proc.pid for w in pool.worker_pool.workers] == pids  # no restart between calls
    assert [r["status"] for r in first] == ["correct", "incorrect", "no_answer"]
    assert [r["status"] for r in second] == ["no_answer", "incorrect", "correct"]
    with pytest.raises(DsdrError, match="closed"):
        grade_samples(rows, pool=pool, progress=False)


def test_the_parent_never_imports_math_verify_or_sympy():
    # they load in the worker processes (grading.verifier); the parent extracts meanwhile
    import subprocess
    import sys

    code = ("import sys, dsdr_eval.grading as g; "
            "assert callable(g.grade_samples) and callable(g.extract_answer) and g.GradingPool; "
            "heavy = [m for m in ('sympy', 'math_verify', 'latex2sympy2_extended', 'rich') if m in sys.modules]; "
            "assert not heavy, heavy")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_workers_without_fork_support_are_fresh_interpreters(monkeypatch):
    # the path of platforms without pidfds / SCM_RIGHTS: each worker runs grading.worker._worker_entry
    from dsdr_eval.grading import pool as grading_pool

    monkeypatch.setattr(grading_pool, "CAN_FORK_WORKERS", False)
    rows = [{"problem_id": "p", "gold": "4", "completion": c} for c in (r"\boxed{4}", r"\boxed{5}", "none")]
    out = grade_samples(rows, grading_timeout_s=5.0, workers=1, progress=False)
    assert [r["status"] for r in out] == ["correct", "incorrect", "no_answer"]
