"""What grading a problem may cost (issue 24): each answer -- its parse, its comparison with the
gold and its class comparisons -- within one timeout however many siblings it has; a problem's
class comparisons within CLASS_BUDGET_TIMEOUTS timeouts; a worker killed once per hanging answer;
a deadline that what the worker sends cannot move.

The in-process tests run the worker's code (``run_task``, ``Verifier``) here, in the main thread,
with math-verify's comparison replaced by a slow one that burns CPU, and time it in this process's CPU
time -- the budgets' own clock (issue 43) -- so the figures do not depend on the machine's load."""

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
        self.times.append(time.process_time())


def _burn_cpu(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:  # interrupted by the budget's CPU timer when it is spent
        pass


def _slow_between_answers(seconds: float, calls: list[int]):
    """math-verify's comparison, slow (``seconds`` of CPU) whenever the 'gold' side has a variable
    (a class comparison of two polynomials); against the numeric gold instant (unequal)."""

    def compare(gold, target, *args, **kwargs):
        if getattr(gold, "free_symbols", None):
            calls.append(1)
            _burn_cpu(seconds)
        return False
    return compare


def _grade_in_process(verifier: Verifier, answers: list[str], gold: str = "204") -> tuple[_Collect, float]:
    conn = _Collect()
    forms = [(a, (), None) for a in answers]
    started = time.process_time()
    run_task((0, (gold, "single", (), False), forms, 0, [], False, 1e-8), conn, verifier)
    return conn, time.process_time() - started


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
    # What the cost bound needs is one kill, decided by the worker's CPU clock (not the wall-clock
    # backstop): a wall-seconds bound here failed on a loaded 2-core machine (issue 43).
    with GradingPool(grading_timeout_s=0.5, workers=1) as pool:
        graded = grade_samples(rows, pool=pool, progress=False)
        assert pool.worker_pool.respawns == 1
    assert [r["status"] for r in graded] == ["incorrect"] * 4 + ["correct", "timeout", "correct"]
    assert graded[5]["grade_note"] == "an answer's grading call used more than 0.5 s of CPU time; worker killed"
    assert not any(r["grade_note"] for r in graded[:5])


def test_every_answer_that_hangs_against_its_gold_is_killed_once():
    # gold 9!!!!!!! parses, but comparing any answer with it hangs in C code: one kill per answer,
    # each charged to its answer alone, and the next problem is still graded.
    rows = [{"problem_id": "p", "gold": "9!!!!!!!", "completion": c} for c in (r"\boxed{5}", r"\boxed{6}")]
    rows.append({"problem_id": "q", "gold": "7", "completion": r"\boxed{7}"})
    with GradingPool(grading_timeout_s=0.5, workers=1) as pool:
        graded = grade_samples(rows, pool=pool, progress=False)
        assert pool.worker_pool.respawns == 2
    assert [r["status"] for r in graded] == ["timeout", "timeout", "correct"]
    assert all("killed" in r["grade_note"] for r in graded[:2])


def test_the_hard_deadline_runs_from_the_units_start_in_the_workers_cpu_time(monkeypatch):
    # What the parent reads: the marker's start of the unit in progress, in the worker's CPU clock
    # (+ timeout) and in wall time (+ the generous backstop); a message received since does not move
    # it, a new unit does. Other processes' CPU does not count: a worker that ran 0.1 s of CPU in 50 s
    # of wall time (a loaded machine) is not overdue. A problem sent but not begun (a worker starved
    # of CPU, not hung) gets WORKER_PICKUP_TIMEOUT_S from the sending.
    fd = new_marker_fd()
    try:
        board = MarkerBoard(fd)
    finally:
        os.close(fd)
    cpu = {"now": 0.0}
    monkeypatch.setattr(grading_pool, "worker_cpu_time", lambda pid: cpu["now"])
    pool = object.__new__(grading_pool.WorkerPool)
    pool.grading_timeout_s = 2.0
    worker = grading_pool._Worker(proc=SimpleNamespace(pid=1), conn=None, marker=board, deadline=0.0, ready=True)
    worker.queued.append(SimpleNamespace(job_id=3))
    worker.sent_at = 100.0
    pickup = 100.0 + grading_pool.WORKER_PICKUP_TIMEOUT_S
    backstop = grading_pool.wall_backstop_s(2.0)
    assert backstop >= 20 * 2.0
    assert pool._overdue(worker, pickup - 1) is None and "did not begin" in pool._overdue(worker, pickup + 1)
    board.mark(3, -1, GOLD, started=(104.0, 1.0))  # the gold: its own CPU bound, far above the answers'
    cpu["now"] = 1.0 + 2.5
    assert pool._overdue(worker, 105.0) is None
    board.mark(3, 0, VERDICT, started=(105.0, 10.0))
    cpu["now"] = 10.1
    assert pool._overdue(worker, 105.0 + 50.0) is None  # 50 s of wall, 0.1 s of its own CPU: starved, not hung
    assert pool._wake_at(worker, 155.0) == pytest.approx(155.0 + 1.9)  # CPU runs no faster than the wall clock
    cpu["now"] = 12.1
    assert "used more than 2 s of CPU time" in pool._overdue(worker, 106.0)
    board.mark(3, 0, CLASS, "incorrect", started=(105.0, 10.0))  # the same answer's class phase: same budget
    pool._handle(worker, ("class", 9, 0, 0, True, None), {})  # a message moves nothing
    assert "used more than 2 s" in pool._overdue(worker, 106.0)
    board.mark(3, 1, VERDICT, started=(106.5, 12.0))  # a new unit: a new start
    assert pool._overdue(worker, 106.6) is None
    cpu["now"] = 12.5
    assert "wall time" in pool._overdue(worker, 106.5 + backstop + 0.1)  # stuck without running: the backstop
    board.mark(7, 0, VERDICT, started=(109.0, 20.0))  # a problem it was not sent: not its work
    assert pool._overdue(worker, 110.0) is None and pool._wake_at(worker, 110.0) <= 110.1
    board.idle()
    assert "did not begin" in pool._overdue(worker, pickup + 1) and board.read().phase == IDLE
    board.close()


def test_a_verdict_is_kept_per_gold_answer_and_tolerance(monkeypatch):
    # The same gold and answer in another problem (a copy of a problem, the next epoch of an RL run) is
    # not compared again (issue 44: score's 8,000-sample benchmark is 800 completions 10 times); another
    # gold, another tolerance or another answer is. Mutant: the key without the gold -> gold x-1 answered
    # "x+1" correct from the cache.
    verifier = Verifier(60.0)
    calls: list[int] = []
    real_verify = math_verify.verify

    def counting(*args, **kwargs):
        calls.append(1)
        return real_verify(*args, **kwargs)

    monkeypatch.setattr(math_verify, "verify", counting)

    def status(task_id: int, gold: str, answer: str, rel_tol: float = 1e-8) -> str:
        conn = _Collect()
        run_task((task_id, (gold, "single", (), False), [(answer, (), None)], 0, [], False, rel_tol), conn, verifier)
        return next(m[3] for m in conn.messages if m[0] == "verdict")

    assert status(0, "x+1", "1+x") == "correct"
    first = len(calls)
    assert first > 0 and status(1, "x+1", "1+x") == "correct" and len(calls) == first  # kept
    assert status(2, "x-1", "1+x") == "incorrect" and len(calls) > first  # another gold: compared
    assert status(3, "x+1", "x+2") == "incorrect"
    assert status(4, "100", "100.00001", rel_tol=1e-4) == "correct"
    assert status(5, "100", "100.00001") == "incorrect"  # another tolerance: compared again
