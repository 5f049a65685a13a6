"""One problem in a grading worker: the verdict of each distinct answer and its answer class.

A task is the tuple ``ProblemJob.task()`` builds: ``(task_id, gold, answers, start, known,
gold_failed, rel_tol)``, where ``gold`` and ``answers`` are answer_norm's wire forms
``(text, mode, items, imaginary_unit, constants)`` and ``(text, items, verdict)``, and ``known`` holds
``(i, status, class_ref, is_rep)`` of every answer the parent already holds (a problem resumed
after a worker kill: ``answers[:start]`` and the answer charged for the kill); those are skipped.

Messages sent back: ``("gold", tid, failure)``, ``("verdict", tid, i, status)``,
``("class", tid, i, class_ref, is_rep, note)``, ``("done", tid)``. ``failure`` is None when the gold
parsed, ``GOLD_EMPTY`` or ``GOLD_TIMEOUT`` when it did not; ``class_ref`` is ``GOLD_CLASS`` or the
index of the answer representing the class; ``note`` says why a class was left unresolved.

The gold is parsed outside every answer's budget, under its own generous bound (``gold_budget_s``,
CPU seconds): a trusted gold is never cut short by a short answer timeout or a loaded machine, and
a gold that cannot be parsed says whether math-verify read nothing or ran out of time (issue 43:
a timed-out gold was reported as "extracted nothing"). Every gold string an answer is compared
with (the gold, its list items, the parts of its tuples) is parsed then and held by the matcher.

Cost (issue 24): each answer -- its parse, its comparison with the gold and its class comparisons
together -- runs under one budget of the worker's timeout (``Verifier.budget``), and the class
comparisons of one problem share ``CLASS_BUDGET_TIMEOUTS`` timeouts; comparisons beyond either
leave the answer a class of its own (with a note) instead of costing every later sibling more.
Before, each of 8 distinct slow answers was compared with every earlier one, each call under its
own alarm: 124 s for one problem, quadratic in its distinct answers.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from dsdr_eval.grading import answer_norm
from dsdr_eval.grading.constants import renamed_equal
from dsdr_eval.grading.extraction import answer_key
from dsdr_eval.grading.marker import CLASS, GOLD, GOLD_INDEX, VERDICT, now

cpu_clock = time.process_time  # the clock of every budget here (grading.budget: never wall time)

if TYPE_CHECKING:
    from dsdr_eval.grading.marker import MarkerBoard
    from dsdr_eval.grading.verifier import Verifier

GOLD_CLASS = -1
_NO_CLASS = -2  # not matched yet
CLASS_BUDGET_TIMEOUTS = 4.0  # class comparisons of one problem: at most this many answer budgets
# A gold's parse: at least this many CPU seconds (or the answer timeout, if longer). The longest gold of
# the six benchmarks is 210 characters and parses in well under a second; this bound only stops a
# gold that would never finish.
GOLD_PARSE_LIMIT_S = 30.0
GOLD_EMPTY, GOLD_TIMEOUT = "empty", "timeout"  # why a gold did not parse


def gold_budget_s(answer_timeout_s: float) -> float:
    """CPU seconds a problem's gold may take to parse (its own bound, not an answer's)."""
    return max(GOLD_PARSE_LIMIT_S, answer_timeout_s)


class _GoldMatcher:
    """Answers against one gold, in the gold's comparison mode (answer_norm's list rules)."""

    def __init__(self, verifier: "Verifier", gold: tuple, rel_tol: float) -> None:
        self.verifier, self.rel_tol = verifier, rel_tol
        self.text, self.mode, self.items, self.imaginary_unit = gold[:4]
        self.constants = gold[4] if len(gold) > 4 else ((), ())  # rule arbitrary_constants (optional)
        self.parsed: dict[str, list] = {}  # every gold string an answer can be compared with

    def parse_gold(self) -> str | None:
        """Parse the gold, its items and its tuples' parts (under the caller's gold budget) -> None,
        or why the gold cannot be graded against: ``GOLD_TIMEOUT`` (its budget ran out) or
        ``GOLD_EMPTY`` (math-verify read nothing from the gold or one of its items)."""
        pending, needed = [self.text, *self.items], {self.text, *self.items}
        while pending:
            text = pending.pop()
            if text in self.parsed:
                continue
            parsed, timed_out = self.verifier.parse(text)
            if timed_out:
                return GOLD_TIMEOUT
            self.parsed[text] = parsed
            inner = answer_norm.unwrap_tuple(text)
            if inner and inner[0] == "(":
                pending += answer_norm.split_top_level(inner[1])
        return GOLD_EMPTY if any(not self.parsed[text] for text in needed) else None

    def matches(self, text: str, items: tuple) -> tuple[bool, bool]:
        """-> (equal, timed_out) of an answer (its text and, in a list mode, its items)."""
        if self.mode == "ordered":
            results = [self.items_equal(g, a) for g, a in zip(self.items, items)]
            return all(r[0] for r in results), any(r[1] for r in results)
        if self.mode == "unordered" and items:
            return self._multiset_equal(items)
        return self.items_equal(self.text, text)

    def _multiset_equal(self, items: tuple) -> tuple[bool, bool]:
        # a multiset matching, greedy (equality is transitive)
        unmatched, timed_out = list(items), False
        for g in self.items:
            for k, a in enumerate(unmatched):
                equal, item_timed_out = self.items_equal(g, a)
                timed_out = timed_out or item_timed_out
                if equal:
                    del unmatched[k]
                    break
            else:
                return False, timed_out
        return True, timed_out

    def items_equal(self, g: str, a: str) -> tuple[bool, bool]:
        """-> (equal, timed_out). Rule ordered_list inside one item: (a, b) against (a', b')
        element by element."""
        g_tuple, a_tuple = answer_norm.unwrap_tuple(g), answer_norm.unwrap_tuple(a)
        if g_tuple and a_tuple and g_tuple[0] == a_tuple[0] == "(":
            return self._tuples_equal(g_tuple[1], a_tuple[1])
        if g == a:
            return True, False
        g_parsed = self.parsed[g]  # parsed with the gold (parse_gold), never under the answer's budget
        a_parsed, a_timed_out = self.verifier.parse(a)
        if not (g_parsed and a_parsed):
            return False, a_timed_out
        equal, timed_out = self.verifier.verify(g_parsed, a_parsed, self.rel_tol, self.imaginary_unit)
        if not equal and not timed_out and self.constants[0] and g == self.text:  # rule arbitrary_constants
            equal, timed_out = renamed_equal(self.verifier, g_parsed, a_parsed, *self.constants, self.rel_tol,
                                             self.imaginary_unit)
        return equal, timed_out or a_timed_out

    def _tuples_equal(self, g_inner: str, a_inner: str) -> tuple[bool, bool]:
        g_parts, a_parts = answer_norm.split_top_level(g_inner), answer_norm.split_top_level(a_inner)
        if len(g_parts) != len(a_parts):
            return False, False
        timed_out = False
        for g_part, a_part in zip(g_parts, a_parts):
            equal, part_timed_out = self.items_equal(g_part, a_part)
            timed_out = timed_out or part_timed_out
            if not equal:
                return False, timed_out
        return True, timed_out


class _AnswerClasses:
    """Answer classes of one problem: correct answers are the gold's class; any other answer joins
    the class of an earlier answer with the same ``answer_key``, else of the first representative
    math-verify calls equal, else opens a class of its own (represented by it when it parsed).
    An answer whose comparisons run out of budget (its own, or the problem's ``limit_s``) is a
    class of its own, not a representative: later answers are never compared with it."""

    def __init__(self, verifier: "Verifier", limit_s: float) -> None:
        self.verifier, self.limit_s = verifier, limit_s
        self.reps: list[tuple[int, list]] = []
        self.key_to_class: dict[str, int] = {}
        self.spent_s = 0.0  # CPU seconds in class comparisons, this problem

    def resume(self, answers: list[tuple], known: list[tuple], begin_unit: Callable[[], None]) -> None:
        """Rebuild the classes of the answers the parent already holds (``(i, status, class_ref,
        is_rep)``); each representative's parse (cached by the worker that ran it, not by this
        one) is a unit of work of its own (``begin_unit``: budget and deadline)."""
        for j, status, class_ref, is_rep in sorted(known):
            if is_rep:
                begin_unit()
                self.reps.append((j, self.verifier.parse(answers[j][0])[0]))
            if status != "correct":
                self.key_to_class.setdefault(answer_key(answers[j][0]), class_ref)

    def assign(self, i: int, answer: str, status: str, pred: list) -> tuple[int, bool, str | None]:
        """-> (class_ref, is_rep, note) of answer ``i``."""
        if status == "correct":
            return GOLD_CLASS, False, None
        key = answer_key(answer)
        class_ref = self.key_to_class.get(key, _NO_CLASS)
        note = None
        if class_ref == _NO_CLASS and status == "incorrect" and pred:
            class_ref, note = self._matching_rep(pred)
        is_rep = False
        if class_ref == _NO_CLASS:
            class_ref = i
            is_rep = status == "incorrect" and bool(pred) and note is None
            if is_rep:
                self.reps.append((i, pred))
        self.key_to_class.setdefault(key, class_ref)
        return class_ref, is_rep, note

    def _matching_rep(self, pred: list) -> tuple[int, str | None]:
        for done, (j, rep) in enumerate(self.reps):
            if self.verifier.clearly_different(rep, pred):
                continue
            if self.verifier.budget.spent() or self.spent_s >= self.limit_s:
                return _NO_CLASS, self._unresolved(done)
            started = cpu_clock()
            equal, timed_out = self.verifier.verify(rep, pred)
            self.spent_s += cpu_clock() - started
            if equal:
                return j, None
            if timed_out:  # undecided, not unequal
                return _NO_CLASS, self._unresolved(done)
        return _NO_CLASS, None

    def _unresolved(self, compared: int) -> str:
        whose = "the answer's" if self.verifier.budget.spent() else "the problem's class-comparison"
        return (f"answer class unresolved: {whose} grading budget was spent after {compared} of "
                f"{len(self.reps)} classes (a class of its own)")


def _verdict(form: tuple, matcher: _GoldMatcher, gold_failed: bool, gold: tuple) -> tuple[str, list]:
    """-> (status, parsed answer) of one answer wire form ``(text, items, ruled)`` against ``gold``
    (its wire form, the key of the worker's verdicts: the same gold and answer in another problem --
    a copy of a problem, the next epoch of an RL run -- are not compared again; a timeout is not kept)."""
    answer, items, ruled = form
    if gold_failed:
        return "error", []
    pred, parse_timed_out = matcher.verifier.parse(answer)
    if ruled is not None:  # an answer_norm rule decided (disowning box, base, list length)
        return ruled, pred
    key = (gold, matcher.rel_tol, answer, items)
    known = matcher.verifier.verdicts.get(key)
    if known is not None:
        return known, pred
    equal, verify_timed_out = matcher.matches(answer, items) if pred or items else (False, False)
    if equal:
        status = "correct"
    elif parse_timed_out or verify_timed_out:
        return "timeout", pred
    else:
        status = "incorrect"
    matcher.verifier.remember(key, status)
    return status, pred


class _NoMarker:
    def mark(self, *args: object, **kwargs: object) -> None:
        pass


def run_task(task: tuple, conn, verifier: "Verifier", marker: "MarkerBoard | None" = None) -> None:
    """One problem: parse the gold, then verdict + class for the answers the parent does not hold,
    streaming results through ``conn`` (a ``_BatchingSender``) and marking each unit of work on
    ``marker`` (the parent's deadline and kill accounting, ``dsdr_eval.grading.marker``). Each
    unit -- each answer -- gets the worker's timeout as its budget of CPU time; the gold gets
    ``gold_budget_s``."""
    task_id, gold, answers, start, known, gold_failed, rel_tol = task
    marker = marker or _NoMarker()
    unit_s = verifier.timeout_s

    def begin_setup_unit(budget_s: float = unit_s) -> None:  # the gold, or a representative re-parsed after a kill
        marker.mark(task_id, GOLD_INDEX, GOLD)
        verifier.budget.start(budget_s)

    try:
        begin_setup_unit(gold_budget_s(unit_s))
        matcher = _GoldMatcher(verifier, gold, rel_tol)
        failure = None if gold_failed else matcher.parse_gold()
        gold_failed = gold_failed or failure is not None
        conn.send(("gold", task_id, failure))
        classes = _AnswerClasses(verifier, CLASS_BUDGET_TIMEOUTS * unit_s)
        classes.resume(answers, known, begin_setup_unit)
        held = {entry[0] for entry in known}
        for i in range(start, len(answers)):
            if i in held:
                continue
            started = now()
            marker.mark(task_id, i, VERDICT, started=started)
            verifier.budget.start(unit_s)
            status, pred = _verdict(answers[i], matcher, gold_failed, gold)
            conn.send(("verdict", task_id, i, status))
            marker.mark(task_id, i, CLASS, status, started=started)  # same budget, same deadline
            class_ref, is_rep, note = classes.assign(i, answers[i][0], status, pred)
            conn.send(("class", task_id, i, class_ref, is_rep, note))
        conn.send(("done", task_id))
    finally:
        verifier.budget.stop()
