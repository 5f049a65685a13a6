"""`score --judge-grading rejected|all`: an LLM judge's verdict beside the symbolic one.

The symbolic grader stays the verdict (``correct``, every metric of ``dsdr_eval.metrics``): the
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
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
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
                               judge_note=verdicts[i].note))
        else:
            note = NOT_ASKED_NO_ANSWER if record.extracted is None else NOT_ASKED_CORRECT
            out.append(replace(record, judge_verdict=None, judge_model=model, judge_note=note))
    return out


def _fraction(count: int, total: int) -> float | None:
    return count / total if total else None


def judge_block(records: list[GradedSample], mode: str) -> dict[str, Any]:
    """One benchmark's ``judge_grading`` block: counts and accuracies over all its samples."""
    n = len(records)
    symbolic = [r.correct for r in records]
    judge = [r.judge_verdict is True for r in records]  # unsure / unavailable / not asked: never correct
    notes = [r.judge_note or "" for r in records]
    decided = [r for r in records if r.judge_verdict is not None]
    measured = mode == ALL  # in rejected mode the accepted samples were never asked
    return {
        "mode": mode, "n_samples": n,
        "n_asked": sum(not note.startswith("not asked") for note in notes),
        "n_judge_equivalent": sum(r.judge_verdict is True for r in records),
        "n_judge_not_equivalent": sum(r.judge_verdict is False for r in records),
        "n_unsure": sum(note.startswith(UNSURE) for note in notes),
        "n_unavailable": sum(note.startswith(UNAVAILABLE) for note in notes),
        "accuracy": {"symbolic": _fraction(sum(symbolic), n),
                     "judge": _fraction(sum(judge), n) if measured else None,
                     "both": _fraction(sum(s and j for s, j in zip(symbolic, judge)), n) if measured else None,
                     "any": _fraction(sum(s or j for s, j in zip(symbolic, judge)), n)},
        "n_disagree": sum(r.judge_verdict != r.correct for r in decided),
        "n_judge_only": sum(r.judge_verdict is True and not r.correct for r in decided),
        "n_symbolic_only": sum(r.judge_verdict is False and r.correct for r in decided),
    }


def judge_metrics(graded: list[GradedSample], mode: str) -> dict[str, dict[str, Any]]:
    """benchmark -> ``judge_block`` of its samples."""
    by_benchmark: dict[str, list[GradedSample]] = {}
    for record in graded:
        by_benchmark.setdefault(record.sample.benchmark, []).append(record)
    return {name: judge_block(records, mode) for name, records in sorted(by_benchmark.items())}


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


def judge_disagreement_records(graded: list[GradedSample]) -> list[dict[str, Any]]:
    """Every sample whose judge verdict (true/false) differs from the symbolic one, whole; the fields of
    disagreements.jsonl where they mean the same (``key, line, gold, status, extraction, extracted,
    completion``), ``symbolic`` and ``judge`` for the two verdicts."""
    return [{"key": list(r.key), "line": r.line, "gold": r.sample.gold, "symbolic": r.correct,
             "judge": r.judge_verdict, "judge_model": r.judge_model, "status": r.status, "extraction": r.extraction,
             "extracted": r.extracted, "completion": r.sample.completion}
            for r in graded if r.judge_verdict is not None and r.judge_verdict != r.correct]


def judge_disagreements_file(graded: list[GradedSample], out_dir: Path) -> dict[str, Any]:
    """``update_metrics`` files entry: judge_disagreements.jsonl's lines when some disagree, its removal
    when an earlier scoring's list is there and none disagree now (or no judge ran), else nothing."""
    records = judge_disagreement_records(graded)
    if records:
        return {JUDGE_DISAGREEMENTS: jsonl_chunks(records)}
    return {JUDGE_DISAGREEMENTS: None} if (out_dir / JUDGE_DISAGREEMENTS).is_file() else {}


__all__ = ["ALL", "JUDGE_DISAGREEMENTS", "MODES", "OFF", "REJECTED", "check_mode", "is_asked", "judge_block",
           "judge_disagreement_records", "judge_disagreements_file", "judge_graded", "judge_metrics", "unavailable_message"]
