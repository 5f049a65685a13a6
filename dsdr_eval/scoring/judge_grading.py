"""`score --judge-grading rejected|all`: an LLM judge's verdict beside the symbolic one.

The symbolic grader stays the verdict (``correct``, every metric of ``dsdr_eval.scoring.metrics``): the
judge's is stored next to it (graded.jsonl ``judge_verdict``, ``judge_model``, ``judge_note``) and
compared with it (metrics.json ``benchmarks.<b>.judge_grading``, judge_disagreements.jsonl). Modes:

* ``rejected``: only samples the symbolic grader rejected (``correct`` false) that have an
  extracted answer are asked. The judge's accuracy and "both" are then not measured (null): the
  accepted samples were never asked; "any" (symbolic or judge) is.
* ``all``: every sample with an extracted answer is asked.

A sample without an extracted answer is never asked. A judge verdict that is not a clear
true/false (an unparseable reply: *unsure*; a failed call: *unavailable*) is null and never counted
correct; both are counted per benchmark. A disagreement is a sample whose judge verdict is true or
false and differs from ``correct``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import IO, Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.audit import with_judge_flag
from dsdr_eval.llm_judge.answers import UNAVAILABLE, UNSURE, AnswerJudge, AnswerQuestion
from dsdr_eval.rundir.jsonl import jsonl_chunks
from dsdr_eval.rundir.samples import GradedSample

OFF, REJECTED, ALL = "off", "rejected", "all"
MODES = (OFF, REJECTED, ALL)
JUDGE_DISAGREEMENTS = "judge_disagreements.jsonl"  # every sample whose judge verdict differs from ``correct``
NOT_ASKED_CORRECT = "not asked: the symbolic grader accepted it"
NOT_ASKED_NO_ANSWER = "not asked: no extracted answer"


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise DsdrError(f"--judge-grading must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def is_asked(record: GradedSample, mode: str) -> bool:
    """Whether ``mode`` asks the judge about ``record``."""
    return record.extracted is not None and (mode == ALL or (mode == REJECTED and not record.correct))


def judge_graded(graded: list[GradedSample], judge: AnswerJudge, mode: str) -> list[GradedSample]:
    """``graded`` with the judge's verdict on each sample ``mode`` asks about (``correct`` unchanged)."""
    check_mode(mode)
    asked = [i for i, record in enumerate(graded) if is_asked(record, mode)]
    questions = [AnswerQuestion(graded[i].sample.problem, graded[i].sample.gold, str(graded[i].extracted))
                 for i in asked]
    verdicts = dict(zip(asked, judge.judge(questions)))
    model = judge.client.config.model
    out = []
    for i, record in enumerate(graded):
        if i in verdicts:
            out.append(replace(record, judge_verdict=verdicts[i].verdict, judge_model=model,
                               judge_note=verdicts[i].note,
                               audit=with_judge_flag(record.audit, verdicts[i].verdict, record.correct)))
        else:
            note = NOT_ASKED_NO_ANSWER if record.extracted is None else NOT_ASKED_CORRECT
            out.append(replace(record, judge_verdict=None, judge_model=model, judge_note=note))
    return out


def _fraction(count: int, total: int) -> float | None:
    return count / total if total else None


class JudgeTally:
    """Each benchmark's ``judge_grading`` block (counts and accuracies over all its samples), fed one
    graded record at a time (``score`` streams a run); every sample whose judge verdict (true/false)
    differs from the symbolic one goes to ``listing`` whole, a JSONL line of judge_disagreements.jsonl
    (the fields of disagreements.jsonl where they mean the same: ``key, line, gold, status, extraction,
    extracted, completion``; ``symbolic`` and ``judge`` for the two verdicts)."""

    _COUNTS = ("n_samples", "n_asked", "n_judge_equivalent", "n_judge_not_equivalent", "n_unsure", "n_unavailable",
               "n_symbolic", "n_judge", "n_both", "n_any", "n_disagree", "n_judge_only", "n_symbolic_only")

    def __init__(self, mode: str, listing: IO[bytes]) -> None:
        self.mode, self.listing = check_mode(mode), listing
        self.counts: dict[str, dict[str, int]] = {}
        self.n_disagree = 0

    def add(self, record: GradedSample) -> None:
        c = self.counts.setdefault(record.sample.benchmark, dict.fromkeys(self._COUNTS, 0))
        note, verdict = record.judge_note or "", record.judge_verdict
        judge = verdict is True  # unsure / unavailable / not asked: never correct
        for name, hit in (("n_samples", True), ("n_asked", not note.startswith("not asked")),
                          ("n_judge_equivalent", verdict is True), ("n_judge_not_equivalent", verdict is False),
                          ("n_unsure", note.startswith(UNSURE)), ("n_unavailable", note.startswith(UNAVAILABLE)),
                          ("n_symbolic", record.correct), ("n_judge", judge), ("n_both", record.correct and judge),
                          ("n_any", record.correct or judge)):
            c[name] += bool(hit)
        if verdict is None or verdict == record.correct:
            return
        c["n_disagree"] += 1
        c["n_judge_only" if verdict else "n_symbolic_only"] += 1
        self.n_disagree += 1
        self.listing.writelines(jsonl_chunks([{
            "key": list(record.key), "line": record.line, "gold": record.sample.gold, "symbolic": record.correct,
            "judge": verdict, "judge_model": record.judge_model, "status": record.status,
            "extraction": record.extraction, "extracted": record.extracted, "completion": record.sample.completion}]))

    def blocks(self) -> dict[str, dict[str, Any]]:
        """benchmark -> its ``judge_grading`` block of metrics.json."""
        measured = self.mode == ALL  # in rejected mode the accepted samples were never asked
        out = {}
        for name, c in sorted(self.counts.items()):
            n = c["n_samples"]
            out[name] = {
                "mode": self.mode, "n_samples": n, "n_asked": c["n_asked"],
                "n_judge_equivalent": c["n_judge_equivalent"], "n_judge_not_equivalent": c["n_judge_not_equivalent"],
                "n_unsure": c["n_unsure"], "n_unavailable": c["n_unavailable"],
                "accuracy": {"symbolic": _fraction(c["n_symbolic"], n),
                             "judge": _fraction(c["n_judge"], n) if measured else None,
                             "both": _fraction(c["n_both"], n) if measured else None,
                             "any": _fraction(c["n_any"], n)},
                "n_disagree": c["n_disagree"], "n_judge_only": c["n_judge_only"],
                "n_symbolic_only": c["n_symbolic_only"],
            }
        return out


def unavailable_message(metrics: dict[str, Any]) -> str | None:
    """What `score` says when judge calls failed (the CLI exits 1, the API raises; the files are written
    either way), else None: an unavailable verdict is never silent."""
    unavailable = sum((entry.get("judge_grading") or {}).get("n_unavailable", 0)
                      for entry in metrics["benchmarks"].values())
    if not unavailable:
        return None
    first = (metrics["provenance"].get("judge_grading") or {}).get("calls", {}).get("first_error")
    return (f"--judge-grading: {unavailable} judge verdicts unavailable (failed calls; first: {first}); graded.jsonl "
            "and metrics.json are written with the symbolic verdicts and these judge verdicts null; score again "
            "to ask only for those (the answered ones are in judge_cache.jsonl)")


__all__ = ["ALL", "JUDGE_DISAGREEMENTS", "MODES", "OFF", "REJECTED", "JudgeTally", "check_mode", "is_asked",
           "judge_graded", "unavailable_message"]
