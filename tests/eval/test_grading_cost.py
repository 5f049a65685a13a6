"""What grading a problem may cost (issue 24): each answer -- its parse, its comparison with the
gold and its class comparisons -- within one timeout however many siblings it has; a problem's
class comparisons within CLASS_BUDGET_TIMEOUTS timeouts; a worker killed once per hanging answer;
a deadline that what the worker sends cannot move.

The in-process tests run the worker's code (``run_task``, ``Verifier``) here, in the main thread,
with math-verify's comparison replaced by a slow one, so the timings are the budgets' own."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest

math_verify = pytest.importorskip("math_verify")

from dsdr_eval.grading import GradingPool, grade_samples  # noqa: E402
from dsdr_eval.grading import pool as grading_pool  # noqa: E402
from dsdr_eval.grading import task as grading_task  # noqa: E402
from dsdr_eval.grading.marker import CLASS, GOLD, IDLE, VERDICT, MarkerBoard, new_marker_fd  # noqa: E402
from dsdr_eval.grading.task import run_task  # noqa: E402
from dsdr_eval.grading.verifier import Verifier  # noqa: E402


class _Collect:
    def __init__(self) -> None:
        self.messages: list[tuple] = []
        self.times: list[float] = []

    def send(self, message: tuple) -> None:
        self.messages.append(message)
        self.times.append(time.monotonic())


def _slow_between_answers(seconds: float, calls: list[int]):
    """math-verify's comparison, slow whenever the 'gold' side has a variable (a class comparison
    of two polynomials); against the numeric gold instant (unequal), so that no CPU time -- which
    a loaded machine rations -- enters the timings, only the budgets' timers."""

    def compare(gold, target, *args, **kwargs):
        if getattr(gold, "free_symbols", None):
            calls.append(1)
            time.sleep(seconds)  # interrupted by the budget's timer when it is spent
        return False
    return compare


def _grade_in_process(verifier: Verifier, answers: list[str], gold: str = "204") -> tuple[_Collect, float]:
    conn = _Collect()
    forms = [(a, (), None) for a in answers]
    started = time.monotonic()
    run_task((0, (gold, "single", (), False), forms, 0, [], False, 1e-8), conn, verifier)
    return conn, time.monotonic() - started


def _warm_verifier(budget_s: float, answers: list[str]) -> Verifier:
    verifier = Verifier(60.0)
    for answer in ["204", *answers]:  # parsed (and cached) here, however loaded the machine
        assert verifier.parse(answer)[0]
    verifier.timeout_s = verifier.budget.call_limit_s = budget_s
    return verifier


def test_each_answer_costs_at_most_its_budget_however_many_siblings(monkeypatch):
    # 6 distinct wrong polynomials, each class comparison 0.3 s: with a budget per call (before)
    # answer k compared with all k-1 earlier ones, 0.3 (k-1) s (1.5 s for the 6th, 4.5 s in all);
    # now each answer stops at its 0.5 s budget and is left a class of its own.
    monkeypatch.setattr(grading_task, "CLASS_BUDGET_TIMEOUTS", 100.0)  # this test: the answer's budget
    budget_s, n = 0.5, 6
    answers = [f"(x+{k})^{{3}}" for k in range(1, n + 1)]
    verifier = _warm_verifier(budget_s, answers)
    calls: list[int] = []
    monkeypatch.setattr(math_verify.grader, "sympy_expr_eq", _slow_between_answers(0.3, calls))
    conn, elapsed = _grade_in_process(verifier, answers)
    classes = [(t, m) for t, m in zip(conn.times, conn.messages) if m[0] == "class"]
    per_answer = [b[0] - a[0] for a, b in zip(classes, classes[1:])]
    assert max(per_answer) < budget_s + 0.25, per_answer
    assert elapsed < n * budget_s + 1.0, elapsed
    assert [m[4] for _, m in classes] == [True, True] + [False] * (n - 2)  # representatives
    assert [m[3] for _, m in classes] == list(range(n))
    assert all("unresolved" in m[5] and "answer's" in m[5] for _, m in classes[2:])
    assert verifier.budget.remaining() == budget_s  # stopped after the task: direct calls get a whole budget


def test_a_problems_class_comparisons_share_one_budget(monkeypatch):
    # comparisons of 0.05 s fit each answer's 1 s budget; the problem's class budget (here 0.25
    # budgets = 0.25 s) stops them after ~5, not the 15 that 6 answers would make.
    monkeypatch.setattr(grading_task, "CLASS_BUDGET_TIMEOUTS", 0.25)
    answers = [f"(x+{k})^{{3}}" for k in range(1, 7)]
    verifier = _warm_verifier(1.0, answers)
    calls: list[int] = []
    monkeypatch.setattr(math_verify.grader, "sympy_expr_eq", _slow_between_answers(0.05, calls))
    conn, elapsed = _grade_in_process(verifier, answers)
    notes = [m[5] for m in conn.messages if m[0] == "class"]
    assert len(calls) < 10 and elapsed < 3.0
    assert any(note and "problem's class-comparison" in note for note in notes)


def test_a_killed_answer_is_charged_once_not_rerun():
    # 9!!!!!!! hangs in C code (no timer can interrupt it): the parent kills the worker once and
    # charges that answer; before, the results buffered with it were lost, the problem was rerun
    # eagerly and 9!!!!!!! killed the worker a second time (11.6 s at a 5 s timeout).
    quick = [rf"\boxed{{{n}}}" for n in range(1, 6)]
    rows = [{"problem_id": "p", "gold": "5", "completion": c} for c in quick + [r"\boxed{9!!!!!!!}", r"\boxed{5.0}"]]
    with GradingPool(timeout_s=0.5, workers=1) as pool:
        started = time.monotonic()
        graded = grade_samples(rows, pool=pool, progress=False)
        elapsed = time.monotonic() - started
        assert pool.worker_pool.respawns == 1
    assert [r["status"] for r in graded] == ["incorrect"] * 4 + ["correct", "timeout", "correct"]
    assert "killed" in graded[5]["grade_note"] and not any(r["grade_note"] for r in graded[:5])
    assert elapsed < 2 * 0.5 + 1.5, elapsed


def test_every_answer_that_hangs_against_its_gold_is_killed_once():
    # gold 9!!!!!!! parses, but comparing any answer with it hangs in C code: one kill per answer,
    # each charged to its answer alone, and the next problem is still graded.
    rows = [{"problem_id": "p", "gold": "9!!!!!!!", "completion": c} for c in (r"\boxed{5}", r"\boxed{6}")]
    rows.append({"problem_id": "q", "gold": "7", "completion": r"\boxed{7}"})
    with GradingPool(timeout_s=0.5, workers=1) as pool:
        graded = grade_samples(rows, pool=pool, progress=False)
        assert pool.worker_pool.respawns == 2
    assert [r["status"] for r in graded] == ["timeout", "timeout", "correct"]
    assert all("killed" in r["grade_note"] for r in graded[:2])


def test_the_hard_deadline_runs_from_the_units_start_not_from_the_last_message():
    # What the parent reads: the marker's start of the unit in progress (+ timeout); a message
    # received since does not move it, a new unit does. A problem sent but not begun (a worker
    # starved of CPU, not hung) gets WORKER_PICKUP_TIMEOUT_S from the sending.
    fd = new_marker_fd()
    try:
        board = MarkerBoard(fd)
    finally:
        os.close(fd)
    pool = object.__new__(grading_pool.WorkerPool)
    pool.timeout_s = 2.0
    worker = grading_pool._Worker(proc=None, conn=None, marker=board, deadline=0.0, ready=True)
    worker.queued.append(SimpleNamespace(job_id=3))
    worker.sent_at = 100.0
    pickup = 100.0 + grading_pool.WORKER_PICKUP_TIMEOUT_S
    assert pool._deadline(worker) == pickup  # nothing marked yet
    board.mark(3, -1, GOLD, started=104.0)
    assert pool._deadline(worker) == 106.0
    board.mark(3, 0, VERDICT, started=105.0)
    assert pool._deadline(worker) == 107.0
    board.mark(3, 0, CLASS, "incorrect", started=105.0)  # the same answer's class phase: same budget
    pool._handle(worker, ("class", 9, 0, 0, True, None), {})  # a message moves nothing
    assert pool._deadline(worker) == 107.0
    board.mark(3, 1, VERDICT, started=106.5)
    assert pool._deadline(worker) == 108.5
    board.mark(7, 0, VERDICT, started=109.0)  # a problem it was not sent: not its work
    assert pool._deadline(worker) == pickup
    board.idle()
    assert pool._deadline(worker) == pickup and board.read().phase == IDLE
    board.close()
