"""Answer extraction and math-verify grading in a pool of killable worker processes.

Pipeline (all of it safe against hostile completions: nothing is ever evaluated as code):

1. ``extract_answer`` (``dsdr_eval.grading.extraction``; parent, linear time, bounded memory) with the
   run's extraction profile; the default ``boxed``: the last ``\\boxed{...}`` / ``\\boxed x`` /
   ``\\fbox{...}`` with real brace matching; otherwise the last "Answer: ..." / "final answer is ..."
   line. Answers longer than ``MAX_ANSWER_CHARS`` are recorded truncated and graded incorrect
   without being parsed (``grade``).
2. Per problem: the gold answer is parsed once (wrapped in ``\\boxed{}`` -- math-verify does not
   extract bare LaTeX); each *distinct* extracted answer is parsed and verified once (``task``).
3. Answer classes: correct answers form one class (the gold's); every other distinct answer is
   matched to the class representatives, first by a cheap normalised-string key, then (unless
   both are unequal integers) by ``math_verify.verify(rep, answer)``; no match opens a new class.
4. All math-verify calls run in long-lived worker processes fed over pipes (``worker``, ``pool``).
   Each unit of work -- each distinct answer with its class comparisons -- must end within
   ``grading_timeout_s`` of the worker's own CPU time from its start as the worker marks it
   (``marker``), a deadline nothing the worker sends can move and other processes cannot spend
   (issue 43); a worker past it (or stuck 20x as long in wall time) is SIGKILLed and replaced, that
   answer alone is marked ``timeout`` and the rest of its problem is resubmitted. Inside the worker
   one CPU-time budget per answer (``budget``; workers are main threads) ends most slow cases a
   little earlier without a respawn, as math-verify's ``TimeoutException`` (``verifier``); class
   comparisons beyond the answer's or the problem's budget leave a class of its own (``task``). A
   problem's gold is parsed first, outside every answer's budget, under its own bound.

Modules: ``grade`` (rows in, graded rows out), ``pool`` (the parent's scheduling, deadlines, kill +
respawn), ``spawn`` (how workers start: the zygote), ``worker`` (the worker process and its zygote's loop), ``task`` (one problem inside a worker),
``marker`` (where a worker is, in shared memory), ``budget`` (the per-answer timer), ``verifier``
(math-verify calls; imported by workers only).
"""

from dsdr_eval.grading.extraction import MAX_ANSWER_CHARS, answer_key, extract_answer, extract_answer_with_method
from dsdr_eval.grading.grade import STATUSES, extract_rows, grade_samples, grader_provenance, status_counts
from dsdr_eval.grading.pool import GradingPool, default_workers

__all__ = ["MAX_ANSWER_CHARS", "STATUSES", "GradingPool", "answer_key", "default_workers", "extract_answer",
           "extract_answer_with_method", "extract_rows", "grade_samples", "grader_provenance", "status_counts"]
