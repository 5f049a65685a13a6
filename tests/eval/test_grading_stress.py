"""Regression tests for grade_samples under trainer-like use: many short calls, a reused
GradingPool, no-answer-heavy batches, deadline kills, and an interrupted call.

The random batches and the output-contract checks come from benchmarks/stress_grading.py (one
implementation; that script runs the long 200-round loop, this file a short seeded slice)."""

from __future__ import annotations

import importlib.util
import random
import signal
from pathlib import Path

import pytest

from dsdr_eval.grading import GradingPool, grade_samples

_SPEC = importlib.util.spec_from_file_location(
    "stress_grading", Path(__file__).resolve().parents[2] / "benchmarks" / "stress_grading.py")
stress = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(stress)

SLOW = r"\boxed{(x+1)^{99999} - (x+1)^{99998}}"  # math-verify spends seconds on it


def _rows(problem_id: str, gold: str, completions: list[str]) -> list[dict]:
    return [{"problem_id": problem_id, "gold": gold, "completion": c} for c in completions]


def test_seeded_random_batches_through_a_reused_pool_and_fresh_workers():
    rng = random.Random(1234)
    with GradingPool(grading_timeout_s=5.0, workers=2) as pool:
        for round_index in range(16):
            rows = stress.make_batch(rng, round_index, slow_p=0.0)
            graded = grade_samples(rows, progress=False, pool=pool if round_index % 4 else None, workers=2)
            stress.check(rows, graded)


def test_no_answer_only_batches_and_mixed_forms_with_a_pool():
    with GradingPool(grading_timeout_s=5.0, workers=1) as pool:
        # Every sample without an answer: nothing reaches the workers, classes are None.
        graded = grade_samples(_rows("g0", "5", ["", " ", "Answer:", r"\boxed{}", " 2 + 3 = 5\nQ:"]) +
                               _rows("g1", "7", ["", ""]), pool=pool, progress=False)
        assert [r["status"] for r in graded] == ["no_answer"] * 7
        assert [r["answer_class"] for r in graded] == [None] * 7 and not any(r["correct"] for r in graded)
        # The same pool right after: equal answers in different forms share the gold's class.
        rows = _rows("g0", "5", ["", r"\boxed{5}", "Answer: 5", r"\boxed{5.0}", r"\boxed{\frac{10}{2}}",
                                 "Answer: 6", r"\boxed{6}", "Answer: **5**", r"\boxed{}"])
        graded = grade_samples(rows, pool=pool, progress=False)
        stress.check(rows, graded)
        assert [r["status"] for r in graded] == ["no_answer", "correct", "correct", "correct", "correct",
                                                 "incorrect", "incorrect", "correct", "no_answer"]
        assert [r["answer_class"] for r in graded] == [None, 0, 0, 0, 0, 1, 1, 0, None]


def test_deadline_kill_inside_a_reused_pool_then_next_call_is_clean():
    with GradingPool(grading_timeout_s=1.0, workers=1) as pool:
        rows = _rows("a", "5", [SLOW, r"\boxed{5}", "", "Answer: 4"])
        graded = grade_samples(rows, pool=pool, progress=False)
        stress.check(rows, graded)
        assert [r["status"] for r in graded] == ["timeout", "correct", "no_answer", "incorrect"]
        rows = _rows("b", "7", ["Answer: 3", r"\boxed{7}"])
        graded = grade_samples(rows, pool=pool, progress=False)
        assert [(r["status"], r["answer_class"]) for r in graded] == [("incorrect", 0), ("correct", 1)]


class _Interrupt(Exception):
    pass


def _raise_interrupt(*_: object) -> None:
    raise _Interrupt


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
def test_interrupted_call_does_not_leak_stale_results_into_the_next_call():
    """Before the fix, the interrupted call's busy worker kept streaming results for its job 0,
    and the next call (whose first job is also 0) took them as its own: "\\boxed{7}" with gold 7
    came back "timeout" and "Answer: 3" "correct"."""
    with GradingPool(grading_timeout_s=3.0, workers=1) as pool:
        grade_samples(_rows("warm", "1", [r"\boxed{1}"]), pool=pool, progress=False)  # worker ready
        previous = signal.signal(signal.SIGALRM, _raise_interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.3)  # fires while the worker is on SLOW
            with pytest.raises(_Interrupt):
                grade_samples(_rows("a", "5", [SLOW, r"\boxed{5}"]), pool=pool, progress=False)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        graded = grade_samples(_rows("b", "7", [r"\boxed{7}", "Answer: 3"]), pool=pool, progress=False)
        assert [(r["status"], r["answer_class"]) for r in graded] == [("correct", 0), ("incorrect", 1)]
