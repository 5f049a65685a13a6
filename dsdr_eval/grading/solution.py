"""The solution a rollout wrote: its text up to the end of its graded final answer (issue 42).

Diversity is a property of solutions. What a model writes after its final answer -- a runaway to the
token cap, an invented next question or turn, a repetition loop -- is not part of the solution, and
counting it made D_emb, Vendi and the partitions measure post-answer noise; a dropped ``$`` before
``\\boxed{}`` let a formula span run from the derivation into that noise and bought D_eq outright.

Rule ``answer-end`` (the default, version ``SOLUTION_CUT_VERSION``): every text part that diversity
measures (``answer``, ``reasoning``, ``whole``) stops where the statement of the graded final answer
ends (``GradedSample.answer_end``: the closing brace of the box the grader read, the end of its
answer line's math span or sentence, ``</answer>``, the number read as the last number). A formula
span still open there closes where the answer's box begins (``formula.extract_formulas(ends_at_answer=True)``),
so no span crosses the answer and a dropped ``$`` measures like the honest solution. A rollout without
an extracted answer keeps its text. Rule ``none`` measures the whole text as before (for comparison).
"""

from __future__ import annotations

from dataclasses import dataclass

from dsdr_eval.errors import DsdrError

SOLUTION_CUTS = ("answer-end", "none")
DEFAULT_SOLUTION_CUT = "answer-end"
SOLUTION_CUT_VERSION = "1"
SOLUTION_CUT_DEFINITIONS = {
    "answer-end": "each measured text stops where the statement of its graded final answer ends (the box the "
                  "grader read, its answer line, tag or number); a formula span still open there closes where the "
                  "answer's box begins; a rollout without an extracted answer keeps its text",
    "none": "the whole measured text, including what follows the final answer (the behaviour before issue 42)",
}
TEXT_PARTS = ("answer", "reasoning", "whole")
DEFAULT_TEXT_PART = "answer"
TEXT_PART_DEFINITIONS = {
    "answer": "the graded answer part of each completion (a thinking model's reasoning left out; the whole "
              "completion of a model that does not reason; empty when the reasoning never closed)",
    "reasoning": "the reasoning of each completion (its reasoning field, else the completion outside its answer part)",
    "whole": "everything generated: the reasoning field, if any, then the completion",
}


@dataclass(frozen=True)
class SolutionText:
    """One rollout's measured text and what the cut did to it."""

    text: str
    after: str  # the measured part's text after the final answer: removed by the cut, kept by "none"
    cut: bool  # the cut applied (rule answer-end and an answer whose end is known)
    ends_at_answer: bool  # the text ends at its graded final answer (formula spans close there)

    @property
    def removed(self) -> str:
        """What the cut removed (empty under "none" or without an answer)."""
        return self.after if self.cut else ""


def check_cut(cut: str) -> str:
    if cut not in SOLUTION_CUTS:
        raise DsdrError(f"unknown solution cut {cut!r} (known: {', '.join(SOLUTION_CUTS)})")
    return cut


def cut_settings(cut: str) -> dict[str, str]:
    """What is recorded with every diversity number about the cut."""
    return {"rule": check_cut(cut), "version": SOLUTION_CUT_VERSION, "definition": SOLUTION_CUT_DEFINITIONS[cut]}


def cut_at_answer(text: str, answer_end: int | None, cut: str = DEFAULT_SOLUTION_CUT) -> SolutionText:
    """A raw completion as the trainer sees it: ``text[:answer_end]`` under ``answer-end``."""
    if answer_end is None:
        return SolutionText(text, "", False, False)
    if cut == "none":
        return SolutionText(text, text[answer_end:], False, False)
    return SolutionText(text[:answer_end], text[answer_end:], True, True)


def solution_text(completion: str, reasoning: str | None, answer_span: tuple[int, int] | None,
                  answer_end: int | None, part: str, cut: str = DEFAULT_SOLUTION_CUT) -> SolutionText:
    """The ``part`` (one of ``TEXT_PARTS``) of a graded rollout, cut at ``answer_end`` (an offset in
    ``completion``) under ``cut``. ``answer_span``: the graded answer part [start, end) of the
    completion (None: the whole completion). The reasoning field, when a source kept it apart,
    precedes the completion, so no cut reaches into it."""
    if part not in TEXT_PARTS:
        raise DsdrError(f"unknown text part {part!r} (known: {', '.join(TEXT_PARTS)})")
    start, end = answer_span if answer_span is not None else (0, len(completion))
    whole = cut_at_answer(completion, answer_end, check_cut(cut))
    stop = len(completion) if answer_end is None else answer_end  # where the solution ends
    cutting = whole.cut
    if part == "answer":
        return SolutionText(completion[start:min(end, stop) if cutting else end], completion[max(start, stop):end],
                            cutting, cutting)
    if part == "reasoning":
        if reasoning is not None:
            return SolutionText(reasoning, "", False, False)
        if answer_span is None:  # a file graded before answer spans: no reasoning told apart
            start = end = len(completion)
        # the completion outside its answer part; after the answer part only what precedes the answer's end
        tail = completion[end:max(end, stop)] if cutting else completion[end:]
        return SolutionText(completion[:start] + tail, completion[max(end, stop):], cutting, False)
    prefix = "" if reasoning is None else reasoning + "\n"
    return SolutionText(prefix + whole.text, whole.after, cutting, cutting)
