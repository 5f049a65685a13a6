"""Verdicts that other processes cannot change (issue 43, item 5).

The grading budget is the worker's own CPU time, so the same run graded idle and beside CPU-bound
processes gets the same verdicts; a gold is parsed outside every answer's budget; a gold that
cannot be parsed says whether it timed out or math-verify read nothing. Before, the budget was wall
time: at a 0.5 s limit 156 of 1,547 self-graded golds changed verdict beside six CPU-bound
processes, and a timed-out gold (Minerva 27) was reported as "extracted nothing".
"""

from __future__ import annotations

import subprocess
import sys

import pytest

math_verify = pytest.importorskip("math_verify")

from dsdr_eval.grading import GradingPool, grade_samples  # noqa: E402
from dsdr_eval.grading import task as grading_task  # noqa: E402
from dsdr_eval.grading.pool import WorkerPool  # noqa: E402
from dsdr_eval.grading.task import GOLD_EMPTY, GOLD_TIMEOUT, run_task  # noqa: E402
from dsdr_eval.grading.verifier import Verifier  # noqa: E402

# Minerva golds (the data set's ids 12, 28, 27, 30, 25) whose answers cost the most CPU to grade in a
# fresh worker: 0.2-0.6 s each (measured in-process at 2ec6e16: gold parse + answer parse + comparison).
HEAVY_GOLDS = [
    r"\frac{2 \pi c^{2} R^{2}}{\lambda^{5}\left[e^{h c /(\lambda k T)}-1\right] d^{2}}",
    r"\left[P_{0}^{2 / 5}-\frac{2}{5} g K^{-3 / 5} z\right]^{5 / 2}",
    r"\frac{10^{5} L_{\odot}}{0.007 c^{2} M_{\odot}^{6}} M^{6}",
    r"\sqrt{4 \pi G \rho_{0} r_{0}^{2}}",
    r"\frac{a M^{1 / 3}}{G M^{2 / 3}+b}",
]
N_BUSY = 8  # CPU-bound neighbours: a worker then gets at most ~2/9 of a 2-core machine


def _rows() -> list[dict]:
    # the gold inside an extra brace group: a different string from the gold, so the answer is parsed
    # and compared under its own budget (an identical one would be the gold's cached parse)
    return [{"problem_id": str(i), "gold": gold, "completion": f"The answer is $\\boxed{{{{{gold}}}}}$."}
            for i, gold in enumerate(HEAVY_GOLDS)]


def _statuses(pool: GradingPool) -> list[tuple[str, str | None]]:
    return [(row["status"], row["grade_note"]) for row in grade_samples(_rows(), pool=pool, progress=False)]


def test_the_same_run_gets_the_same_verdicts_idle_and_beside_cpu_bound_processes():
    # Each answer costs at most ~0.6 s of CPU, under a third of the 2 s limit: graded alone, none times
    # out. Beside 8 busy processes a worker gets at most ~2/9 of a core, so the heaviest answers take
    # 2-3 s of wall time or more -- past the limit when it is counted in wall time (mutant: ITIMER_REAL /
    # monotonic in grading.budget -> timeouts in the loaded run only). Both pools (one fresh worker
    # each, nothing cached) start before the neighbours do: only the grading runs beside them.
    with GradingPool(grading_timeout_s=2.0, workers=1) as idle_pool, GradingPool(grading_timeout_s=2.0, workers=1) as loaded_pool:
        idle = _statuses(idle_pool)
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(N_BUSY)]
        try:
            loaded = _statuses(loaded_pool)
        finally:
            for proc in busy:
                proc.kill()
            for proc in busy:
                proc.wait()
    assert loaded == idle
    assert [status for status, _ in idle] == ["correct"] * len(HEAVY_GOLDS), idle


def test_a_gold_is_parsed_outside_the_answers_budget():
    # Minerva 27's gold costs ~0.2-0.5 s of CPU to parse in a fresh worker, several times a 0.1 s
    # answer timeout; it has its own bound, so its answers are graded (mutant: the gold's unit started
    # with the answer's budget -> every sample "error", the gold "timed out").
    gold = HEAVY_GOLDS[2]
    rows = [{"problem_id": "27", "gold": gold, "completion": f"So $\\boxed{{{gold}}}$."},
            {"problem_id": "27", "gold": gold, "completion": "no answer here"}]
    graded = grade_samples(rows, grading_timeout_s=0.1, workers=1, progress=False)
    assert [row["status"] for row in graded] == ["correct", "no_answer"], [row["grade_note"] for row in graded]


class _Collect:
    def __init__(self) -> None:
        self.messages: list[tuple] = []

    def send(self, message: tuple) -> None:
        self.messages.append(message)


def _gold_message(verifier: Verifier, gold: str) -> tuple:
    conn = _Collect()
    run_task((0, (gold, "single", (), False), [("5", (), None)], 0, [], False, 1e-8), conn, verifier)
    return next(m for m in conn.messages if m[0] == "gold")


def test_a_gold_that_times_out_is_reported_as_a_timeout_not_as_extracted_nothing(monkeypatch):
    verifier = Verifier(5.0)
    verifier.warm_up()
    # the budget timer fires inside math-verify's parse (as it does when a gold's CPU budget runs out);
    # raised on purpose, not raced against a 1 us CPU timer whose tick a cached parse can beat
    real_parse = math_verify.parse

    def times_out(text, *args, **kwargs):
        if "L_{\\odot}" in text:
            raise math_verify.errors.TimeoutException("budget spent")
        return real_parse(text, *args, **kwargs)

    monkeypatch.setattr(math_verify, "parse", times_out)
    assert _gold_message(verifier, HEAVY_GOLDS[2]) == ("gold", 0, GOLD_TIMEOUT)
    monkeypatch.setattr(math_verify, "parse", real_parse)
    monkeypatch.setattr(grading_task, "GOLD_PARSE_LIMIT_S", 30.0)
    assert _gold_message(verifier, r"\text{}") == ("gold", 0, GOLD_EMPTY)  # math-verify reads nothing in it
    assert _gold_message(verifier, "5") == ("gold", 0, None)
    # what the samples of such a problem say (status error, the note naming the cause)
    pool = object.__new__(WorkerPool)
    pool.grading_timeout_s = 0.5
    assert "timed out" in pool._gold_note(GOLD_TIMEOUT) and "extracted nothing" not in pool._gold_note(GOLD_TIMEOUT)
    assert "extracted nothing" in pool._gold_note(GOLD_EMPTY)
