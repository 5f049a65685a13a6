"""math-verify timeouts are known by its TimeoutException, never by what it logs (issue 11, item 8).

The Verifier runs in this process here (a main thread, so the budget's CPU timer works); in
production it runs in the grading workers.
"""

from __future__ import annotations

import logging
import time

import pytest

math_verify = pytest.importorskip("math_verify")

from dsdr_eval.grading.task import run_task  # noqa: E402
from dsdr_eval.grading.verifier import Verifier  # noqa: E402


@pytest.fixture(scope="module")
def verifier() -> Verifier:
    v = Verifier(1)
    v.warm_up()
    return v


def _fresh(verifier: Verifier) -> Verifier:
    verifier._cache.clear()  # every test parses from scratch
    verifier.verdicts.clear()  # and compares from scratch
    return verifier


def _log_like_a_timeout(real, message: str):
    def logging_call(*args, **kwargs):
        logging.getLogger("math_verify.parser").warning(message)
        return real(*args, **kwargs)
    return logging_call


def test_a_log_line_that_reads_like_a_timeout_is_not_one(verifier, monkeypatch):
    v = _fresh(verifier)
    monkeypatch.setattr(math_verify, "parse", _log_like_a_timeout(math_verify.parse, "Timeout during parsing: 7"))
    monkeypatch.setattr(math_verify, "verify", _log_like_a_timeout(math_verify.verify, "Timeout during comparison"))
    seven, timed_out = v.parse("7")
    assert seven and timed_out is False
    assert v.verify(seven, v.parse("7.0")[0]) == (True, False)
    assert v.verify(seven, v.parse("8")[0]) == (False, False)


def _too_slow(*args, **kwargs):
    end = time.process_time() + 5
    while time.process_time() < end:  # interrupted by the budget's CPU timer after 1 s of CPU
        pass
    raise AssertionError("the grading budget's timer did not fire")


def test_a_real_parse_timeout_is_one(verifier, monkeypatch):
    v = _fresh(verifier)
    monkeypatch.setattr(math_verify.parser, "extract_target_from_pred", _too_slow)
    start = time.process_time()
    assert v.parse("x^2 + 1") == ([], True)
    assert time.process_time() - start < 4


def test_a_real_comparison_timeout_is_one_and_other_pairs_are_still_compared(verifier, monkeypatch):
    v = _fresh(verifier)
    gold, pred = v.parse("x + 1")[0], v.parse("1 + x")[0]
    assert len(gold) == 2 and len(pred) == 2  # (sympy expression, string) each
    monkeypatch.setattr(math_verify.grader, "sympy_expr_eq", _too_slow)
    assert v.verify(gold, pred) == (False, True)  # both strings differ: unequal, and it timed out
    same = v.parse("x+1")[0]
    assert v.verify(same, same) == (True, True)  # the string pair still matched after the timeout


def test_a_parse_error_is_not_a_timeout(verifier, monkeypatch):
    v = _fresh(verifier)

    def broken(*args, **kwargs):
        raise ValueError("unparseable")

    monkeypatch.setattr(math_verify.parser, "extract_target_from_pred", broken)
    assert v.parse("x^2 + 1") == ([], False)


class _Collect:
    def __init__(self) -> None:
        self.messages: list[tuple] = []

    def send(self, message: tuple) -> None:
        self.messages.append(message)


def _statuses(verifier: Verifier, gold: str, answers: list[str]) -> list[str]:
    conn = _Collect()
    forms = [(a, (), None) for a in answers]
    run_task((0, (gold, "single", (), False), forms, 0, [], False, 1e-8), conn, verifier)
    return [m[3] for m in conn.messages if m[0] == "verdict"]


def test_task_status_timeout_only_for_a_real_timeout(verifier, monkeypatch):
    v = _fresh(verifier)
    monkeypatch.setattr(math_verify, "verify", _log_like_a_timeout(math_verify.verify, "Timeout during comparison"))
    assert _statuses(v, "x+1", ["1+x", "x+2"]) == ["correct", "incorrect"]
    monkeypatch.undo()
    v = _fresh(verifier)
    monkeypatch.setattr(math_verify.grader, "sympy_expr_eq", _too_slow)
    assert _statuses(v, "x+1", ["x+2"]) == ["timeout"]
