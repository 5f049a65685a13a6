"""Grading a list of sample rows: extraction in the parent, math-verify in the worker pool.

``grade_samples`` groups rows into problems by (benchmark, problem_id), extracts each completion's
answer (``dsdr_eval.grading.extraction``, linear time), sends each problem's distinct answers to the pool
(``dsdr_eval.grading.pool``) and copies verdicts and answer classes back onto the rows.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable, NamedTuple

from dsdr_eval.grading import answer_norm
from dsdr_eval.grading.answer_norm import GradingOptions
from dsdr_eval.grading.audit import AUDIT_VERSION, FLAGS, audit_flags
from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.extraction import (DEFAULT_EXTRACTION, EXTRACTION_RULES_VERSION, GUESS_EXTRACTORS, MAX_ANSWER_CHARS,
                                         Extraction, ExtractionProfile, extract_answer_with_method, get_profile)
from dsdr_eval.grading.pool import (WALL_BACKSTOP_FACTOR, WALL_BACKSTOP_MIN_S, GradingPool, ProblemJob, WorkerPool,
                                    default_workers)
from dsdr_eval.grading.reasoning import (DEFAULT_REASONING_FORMAT, UNCLOSED, ReasoningFormat, parse_reasoning_format,
                                         split_completion)
from dsdr_eval.grading.task import CLASS_BUDGET_TIMEOUTS, gold_budget_s
from dsdr_eval.progress import progress_bar
from dsdr_eval.names import DEFAULT_BENCHMARK

# truncated: the reasoning never closed, or the response hit its token limit (finish_reason
# "length") without an answer it marked as final -- never correct, under every profile (issue 33)
STATUSES = ("correct", "incorrect", "no_answer", "truncated", "timeout", "error")
TRUNCATED = "truncated"
LENGTH = "length"  # the finish_reason of a response that spent its token budget
# the rules that can change a sample's extracted answer from the whole completion's (``changed_by``),
# in the order they apply
ANSWER_PART, REASONING_UNCLOSED, LENGTH_NO_FINAL = "answer_part", "reasoning_unclosed", "length_no_final_answer"
ANSWER_RULES = (ANSWER_PART, REASONING_UNCLOSED, LENGTH_NO_FINAL)


def grade_samples(rows: list[dict], *, grading_timeout_s: float = 5.0, workers: int | None = None,
                  progress: bool = True, pool: GradingPool | None = None,
                  options: GradingOptions | None = None, extraction: str = DEFAULT_EXTRACTION,
                  reasoning_format: "str | ReasoningFormat" = DEFAULT_REASONING_FORMAT) -> list[dict]:
    """Grade completions; return copies of ``rows`` with grading fields added.

    Added: ``extracted`` (str | None, truncated to MAX_ANSWER_CHARS), ``extraction`` (method),
    ``status`` (one of STATUSES), ``correct`` (bool), ``answer_class`` (int index of the
    math-equivalence class of the answer within its problem, in order of first appearance;
    None without an answer), ``grade_note`` (why a status is timeout/error/truncated, or how the
    gold was read when that differs from how it is written, else None),
    ``reasoning_state`` / ``answer_span`` / ``changed_by`` (``_extract_into``), ``audit`` (the names of
    ``dsdr_eval.grading.audit.FLAGS`` the row raises: doubts for a person, never a verdict).
    Rows are grouped into problems by (benchmark, problem_id). A row's optional ``answer_meta``
    (the benchmark's answer_type / is_multiple_answer / unit) and ``problem`` text choose the
    comparison mode (answer_norm: grading rules, ``options`` their conventions). ``extraction``: the
    answer convention, a profile name of ``dsdr_eval.grading.extraction.EXTRACTION_PROFILES``. With ``pool`` its
    long-lived workers (and its timeout) are used and left running; otherwise workers are started here.
    ``reasoning_format``: how completions mark their reasoning (``dsdr_eval.grading.reasoning``); only
    the answer part is graded."""
    if grading_timeout_s <= 0:
        raise DsdrError(f"grading timeout must be > 0 s (got {grading_timeout_s})")
    if pool is not None and pool.worker_pool is None:
        raise DsdrError("grade_samples: the GradingPool has been closed")
    grouped = _Grouped(rows, extraction, reasoning_format)
    # Start the pool now: its math-verify import overlaps with extraction below.
    n_workers = max(1, min(workers or default_workers(), len(grouped.problems)))
    worker_pool = (pool.worker_pool if pool is not None
                   else WorkerPool(n_workers, grading_timeout_s) if grouped.problems else None)
    try:
        prepared = grouped.extract(options)
        _run_jobs(prepared.jobs, worker_pool, progress)
    finally:
        if worker_pool is not None and pool is None:
            worker_pool.close()
    # a given pool's own timeout
    return _finish(prepared, worker_pool.grading_timeout_s if worker_pool is not None else grading_timeout_s)


class PreparedGrading(NamedTuple):
    """Rows grouped into problems, answers extracted, the problems' jobs built: what ``grade_prepared``
    sends to a pool. ``prepare_grading`` makes it with no worker involved, so a caller can prepare the
    next rows while a pool grades these (``dsdr_eval.scoring.score`` does, issue 44)."""

    graded: list[dict]
    problems: dict[tuple[str, str], dict]
    jobs: list[ProblemJob]
    profile: ExtractionProfile  # the audit reads answers with it too


def prepare_grading(rows: list[dict], *, options: GradingOptions | None = None, extraction: str = DEFAULT_EXTRACTION,
                    reasoning_format: "str | ReasoningFormat" = DEFAULT_REASONING_FORMAT) -> PreparedGrading:
    """``grade_samples``' work before the pool: the same checks, grouping and extraction."""
    return _Grouped(rows, extraction, reasoning_format).extract(options)


def grade_prepared(prepared: PreparedGrading, pool: GradingPool, *, progress: bool = False) -> list[dict]:
    """``grade_samples(rows, pool=pool)`` of the rows ``prepared`` was made from."""
    if pool.worker_pool is None:
        raise DsdrError("grade_samples: the GradingPool has been closed")
    _run_jobs(prepared.jobs, pool.worker_pool, progress)
    return _finish(prepared, pool.worker_pool.grading_timeout_s)


class _Grouped:
    """Rows checked and grouped into problems by (benchmark, problem_id); ``extract`` reads their answers."""

    def __init__(self, rows: list[dict], extraction: str, reasoning_format: "str | ReasoningFormat") -> None:
        self.profile = get_profile(extraction)
        self.fmt = parse_reasoning_format(reasoning_format)
        self.graded: list[dict] = []
        self.problems: dict[tuple[str, str], dict] = {}
        for index, row in enumerate(rows):
            for name in ("problem_id", "gold", "completion"):
                if name not in row or row[name] is None:
                    raise DsdrError(f"sample {index}: missing field '{name}'")
            key = (str(row.get("benchmark", DEFAULT_BENCHMARK)), str(row["problem_id"]))
            gold = str(row["gold"])
            problem = self.problems.setdefault(key, {"gold": gold, "answers": {}, "rows": [],
                                                     "meta": row.get("answer_meta"), "problem": row.get("problem"),
                                                     "gold_note": None})
            if problem["gold"] != gold:
                raise DsdrError(f"sample {index}: problem {key[1]!r} of benchmark {key[0]!r} has conflicting gold "
                                f"answers {problem['gold']!r} and {gold!r}")
            out = dict(row)
            problem["rows"].append(out)
            self.graded.append(out)

    def extract(self, options: GradingOptions | None) -> PreparedGrading:
        options = options or GradingOptions()
        for problem in self.problems.values():
            for out in problem["rows"]:
                _extract_into(out, problem["answers"], self.profile, self.fmt)
        jobs = [_problem_job(job_id, p, options) for job_id, p in enumerate(self.problems.values()) if p["answers"]]
        return PreparedGrading(self.graded, self.problems, jobs, self.profile)


def _run_jobs(jobs: list[ProblemJob], worker_pool: WorkerPool | None, progress: bool) -> None:
    if jobs and worker_pool is not None:
        with progress_bar(sum(sum(job.weights) for job in jobs), "grading", unit="sample", enabled=progress) as bar:
            worker_pool.on_progress = bar.advance
            worker_pool.run(jobs)


def _finish(prepared: PreparedGrading, budget_s: float) -> list[dict]:
    job_iter = iter(prepared.jobs)
    for problem in prepared.problems.values():
        job = next(job_iter) if problem["answers"] else None
        _finish_problem(problem["rows"], job, budget_s)
        # rule ordered_list: a gold read otherwise than written (extremes put in the question's order)
        # is said on every row of its problem that has no other note
        for row in problem["rows"] if problem["gold_note"] else ():
            row["grade_note"] = row["grade_note"] or problem["gold_note"]
        for row in problem["rows"]:
            row["audit"] = audit_flags(row, prepared.profile)  # issue 43: what a person should look at
    return prepared.graded


def extract_rows(rows: Iterable[dict], *, extraction: str = DEFAULT_EXTRACTION,
                 reasoning_format: "str | ReasoningFormat" = DEFAULT_REASONING_FORMAT) -> list[dict]:
    """Copies of ``rows`` (each with a ``completion``) with the fields extraction sets in ``grade_samples``
    (extracted, extraction, reasoning_state, answer_span, answer_end, ...) and no verdict: where a rollout's
    answer and solution end, for a caller whose verdicts come from elsewhere (verl's reward function)."""
    profile, fmt, out = get_profile(extraction), parse_reasoning_format(reasoning_format), []
    for row in rows:
        copy = dict(row)
        _extract_into(copy, {}, profile, fmt)
        out.append(copy)
    return out


def _problem_job(job_id: int, problem: dict, options: GradingOptions) -> ProblemJob:
    meta = problem["meta"] if isinstance(problem["meta"], dict) else None
    text = problem["problem"] if isinstance(problem["problem"], str) else None
    gold = answer_norm.prepare_gold(problem["gold"], meta, text)
    problem["gold_note"] = gold.note
    answers = list(problem["answers"])
    forms = [answer_norm.wire_answer(answer_norm.prepare_answer(answer, gold, options)) for answer in answers]
    return ProblemJob(job_id, answer_norm.wire_gold(gold), answers, list(problem["answers"].values()), forms,
                       options.rel_tol)


def _extract_into(out: dict, answer_counts: dict[str, int], profile: ExtractionProfile, fmt: ReasoningFormat) -> None:
    """Set extracted/extraction/grade_note/status and reasoning_state/answer_span/changed_by on a row;
    count answers that need math-verify."""
    completion = out["completion"]
    note, status = None, None
    out["reasoning_state"], out["answer_span"], out["changed_by"], out["answer_end"] = None, None, [], None
    if not isinstance(completion, str):
        extraction, note = Extraction(None, None), f"completion is {type(completion).__name__}, not a string"
        status = "error"
    else:
        extraction, status, note = _extract_answer_part(out, completion, profile, fmt)
    out["extracted"], out["extraction"], out["grade_note"] = extraction.answer, extraction.method, note
    if extraction.answer is not None and extraction.end is not None:  # issue 42: where the solution ends
        out["answer_end"] = out["answer_span"][0] + extraction.end
    out["status"] = status or ("no_answer" if extraction.answer is None else None)
    if extraction.answer is not None and len(extraction.answer) > MAX_ANSWER_CHARS:
        out["extracted"] = extraction.answer[:MAX_ANSWER_CHARS]
        out["status"] = "incorrect"
        out["grade_note"] = (f"extracted answer has {len(extraction.answer)} characters (> {MAX_ANSWER_CHARS}); "
                             "truncated here and not verified")
    elif out["status"] is None:
        answer_counts[extraction.answer] = answer_counts.get(extraction.answer, 0) + 1


def _extract_answer_part(out: dict, completion: str, profile: ExtractionProfile,
                         fmt: ReasoningFormat) -> tuple[Extraction, str | None, str | None]:
    """-> (extraction, status or None, note) of a completion's answer part; records the split and
    which rules changed the answer from the whole completion's (each against the stage before it:
    the whole completion, its answer part, the answer part without guesses)."""
    reasoning = out.get("reasoning")
    prompt = out.get("prompt")
    split = split_completion(completion, fmt, reasoning=reasoning if isinstance(reasoning, str) else None,
                             prompt=prompt if isinstance(prompt, str) else None)
    out["reasoning_state"], out["answer_span"] = split.state, list(split.answer_span)
    hit_limit = out.get("finish_reason") == LENGTH
    whole_span = split.answer_span == (0, len(completion))
    changed: list[str] = out["changed_by"]
    # the whole completion's answer (what grading read before issue 33), only to count what the rules change
    whole = extract_answer_with_method(completion, profile) if not whole_span or hit_limit else None
    if split.state == UNCLOSED:
        if whole is not None and whole.answer is not None:
            changed.append(REASONING_UNCLOSED)
        why = "hit its token limit" if hit_limit else "ended"
        return (Extraction(None, None), TRUNCATED,
                f"the reasoning never closed ({split.source} format): the completion {why} inside it (no answer)")
    part = whole if whole_span and whole is not None else extract_answer_with_method(split.answer(completion), profile)
    if whole is not None and part.answer != whole.answer:
        changed.append(ANSWER_PART)
    if not hit_limit:
        return part, None, None
    final = (extract_answer_with_method(split.answer(completion), profile, final_only=True)
             if part.method in GUESS_EXTRACTORS else part)
    if final.answer != part.answer:
        changed.append(LENGTH_NO_FINAL)
    if final.answer is None:
        return (final, TRUNCATED, "the response hit its token limit (finish_reason 'length') without an answer "
                "marked as final (a last number or output block of an unfinished response is not read)")
    return final, None, None


def _finish_problem(rows: list[dict], job: ProblemJob | None, budget_s: float) -> None:
    """Copy verdicts onto rows; renumber classes 0, 1, ... by first appearance in the rows."""
    index = {answer: i for i, answer in enumerate(job.answers)} if job else {}
    class_numbers: dict[Any, int] = {}
    for row in rows:
        answer = row["extracted"]
        if row["status"] is None:  # went through the workers
            i = index[answer]
            row["status"] = job.status[i] or "error"
            row["grade_note"] = row["grade_note"] or job.notes[i]
            if row["status"] == "timeout" and not row["grade_note"]:
                # math-verify's own alarms are off in the workers (grading.budget): a timeout without a
                # note is the worker's per-answer CPU-time budget, not a per-call math-verify timeout
                row["grade_note"] = (f"timeout: the answer's grading budget ({budget_s:g} s of CPU time for its parse and "
                                     "its comparison with the gold together) was spent (answer counted as not correct)")
            ref: Any = job.class_ref[i] if job.class_ref[i] is not None else ("solo", i)
        elif answer is not None:  # over-long answer: a class of its own per distinct string
            ref = ("long", answer)
        else:
            ref = None
        row["correct"] = row["status"] == "correct"
        row["answer_class"] = None if ref is None else class_numbers.setdefault(ref, len(class_numbers))


def status_counts(rows: Iterable[dict]) -> dict[str, int]:
    counts = {status: 0 for status in STATUSES}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return counts


def grader_provenance(grading_timeout_s: float, workers: int | None, options: GradingOptions | None = None,
                      extraction: str = DEFAULT_EXTRACTION,
                      reasoning_format: "str | ReasoningFormat" = DEFAULT_REASONING_FORMAT) -> dict[str, Any]:
    import importlib.metadata as md

    def version(name: str) -> str | None:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    return {"grader": "math-verify", "math_verify_version": version("math-verify"),
            "latex2sympy2_extended_version": version("latex2sympy2_extended"), "sympy_version": version("sympy"),
            "grading_timeout_s": grading_timeout_s, "workers": workers or default_workers(),
            # issue 24: grading_timeout_s is a budget per answer, not per math-verify call (grading.budget, grading.task)
            "timeout_scope": "per answer, in the grading worker's own CPU time (never wall time: other processes "
                             "cannot spend it): its parse, its comparison with the gold and its answer-class "
                             "comparisons share one grading_timeout_s budget; a problem's class comparisons together "
                             f"get at most {CLASS_BUDGET_TIMEOUTS:g} x grading_timeout_s; a call past grading_timeout_s "
                             "of CPU kills the "
                             f"worker, as does one stuck {WALL_BACKSTOP_FACTOR:g} x its limit (at least "
                             f"{WALL_BACKSTOP_MIN_S:g} s) of wall time; the gold is parsed outside every answer's "
                             "budget, under its own bound (gold_parse_limit_s of CPU)",
            "gold_parse_limit_s": gold_budget_s(grading_timeout_s),
            "class_budget_timeouts": CLASS_BUDGET_TIMEOUTS,
            "extraction": extraction, "extraction_profile": get_profile(extraction).provenance(),
            "extraction_rules_version": EXTRACTION_RULES_VERSION, "max_answer_chars": MAX_ANSWER_CHARS,
            "gold_wrapping": "\\boxed{gold}", "python": sys.version.split()[0],
            "reasoning": parse_reasoning_format(reasoning_format).provenance(),
            "truncated_rule": "status truncated (never correct): the reasoning never closed, or finish_reason "
                              "'length' and no answer marked as final (box, answer line or tag, ####); the "
                              f"guess extractors ({', '.join(sorted(GUESS_EXTRACTORS))}) are not read then",
            "grading_rules": answer_norm.rules_provenance(options or GradingOptions()),
            "audit": {"audit_version": AUDIT_VERSION, "flags": {name: meaning for name, (meaning, _) in FLAGS.items()}}}
