"""What a diversity number measured: the validity line of a run's diversity (issue 42).

Per benchmark, over the sampled rollouts: how many the solution cut shortened and the share of
characters it removed; how many hit the token cap (finish_reason "length": the model never ended its
solution); how many carried long text after their final answer (a runaway, an invented next turn);
how many were longer than the encoder's window (D_emb then compares how solutions begin, unless
the windows are pooled); how many solutions hold no formula the extractor reads (D_eq counts each 0,
Eq. 8: an equation written without math delimiters, ``3 x 11 = 33``, is not seen); and how many carry
an unbalanced ``$`` (a dropped closing ``$``, the hack of design 2, issue 42). A share at or above
``WARN_SHARE`` becomes a warning, which ``diversity`` prints and the report and the dashboard show
beside the numbers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dsdr_eval.diversity_metrics.formula import unbalanced_dollar
from dsdr_eval.grading.solution import SolutionText
from dsdr_eval.rundir.samples import GradedSample

WARN_SHARE = 0.10
# "long text after the answer": what follows the final answer holds at least this share of the
# rollout's non-space characters
LONG_AFTER_ANSWER_SHARE = 0.25
DEFINITIONS = {
    "cut": "rollouts whose measured text the solution cut shortened by more than closing delimiters and punctuation",
    "token_cap": "rollouts that stopped at their token limit (finish_reason 'length')",
    "long_after_answer": f"rollouts whose text after the final answer holds >= {LONG_AFTER_ANSWER_SHARE:g} of "
                         "their non-space characters",
    "over_window": "rollouts whose measured text has more tokens than the encoder reads in one window",
    "without_formula": "rollouts whose measured text holds no formula of the D_eq extraction rule (D_eq 0, Eq. 8)",
    "unbalanced_dollar": "rollouts whose measured text has an odd number of unescaped $",
    "warn_share": f"a warning when a share is >= {WARN_SHARE:g}",
}


# what closes a statement rather than continuing it: the rest of a math span the box sat in (`$`, `\]`,
# `\)`, `\end{..}`), closing brackets and sentence punctuation ("\boxed{420}.$$" ends there)
_CLOSING = re.compile(r"\\end\{[^{}\n]{0,40}\}|\\[\])]|[\s$.,;:!)}\]]")


def _nonspace(text: str) -> int:
    """Characters of ``text`` that continue it: a tail of only closers and punctuation counts 0."""
    return len(_CLOSING.sub("", text))


@dataclass
class _Counts:
    rollouts: int = 0
    cut: int = 0
    chars_total: int = 0
    chars_removed: int = 0
    without_answer_end: int = 0
    token_cap: int = 0
    long_after_answer: int = 0
    unbalanced_dollar: int = 0
    formula_rollouts: int = 0
    without_formula: int = 0
    window_rollouts: int = 0
    over_window: int = 0
    tokens_total: int = 0
    tokens_seen: int = 0
    window: dict[str, Any] = field(default_factory=dict)


class ValidityCounter:
    """Counts per benchmark, fed one rollout at a time (a run is read one problem at a time)."""

    def __init__(self, cut: str) -> None:
        self.cut = cut
        self.counts: dict[str, _Counts] = {}

    def add_rollout(self, benchmark: str, record: GradedSample, solution: SolutionText) -> None:
        c = self.counts.setdefault(benchmark, _Counts())
        c.rollouts += 1
        removed, after = solution.removed, _nonspace(solution.after)
        c.cut += bool(removed) and after > 0
        c.chars_total += len(solution.text) + len(removed)
        c.chars_removed += len(removed)
        c.without_answer_end += record.extracted is not None and record.answer_end is None
        c.token_cap += record.sample.finish_reason == "length"
        whole = _nonspace(solution.text) + (0 if removed else -after) + after  # the rollout's measured part
        c.long_after_answer += after > 0 and after >= LONG_AFTER_ANSWER_SHARE * whole
        c.unbalanced_dollar += unbalanced_dollar(solution.text)

    def add_formulas(self, benchmark: str, n_formulas: Sequence[int]) -> None:
        """The number of distinct formulas D_eq read in each of a group's measured texts."""
        c = self.counts.setdefault(benchmark, _Counts())
        c.formula_rollouts += len(n_formulas)
        c.without_formula += sum(1 for n in n_formulas if n == 0)

    def add_window(self, benchmark: str, token_counts: Sequence[int], seen: Sequence[int],
                   window: dict[str, Any]) -> None:
        """Token counts of a group's measured texts and how many of each the encoder read."""
        c = self.counts.setdefault(benchmark, _Counts())
        c.window = window
        c.window_rollouts += len(token_counts)
        c.over_window += sum(1 for n, k in zip(token_counts, seen) if k < n)
        c.tokens_total += int(sum(token_counts))
        c.tokens_seen += int(sum(seen))

    def summary(self, benchmark: str) -> dict[str, Any]:
        c = self.counts.get(benchmark, _Counts())
        n = max(c.rollouts, 1)

        def share(k: int, total: int = n) -> float | None:
            return k / total if total else None

        out: dict[str, Any] = {
            "n_rollouts": c.rollouts,
            "solution_cut": {"rule": self.cut, "n_cut": c.cut, "share_cut": share(c.cut),
                             "chars_removed_share": share(c.chars_removed, c.chars_total),
                             "n_without_answer_end": c.without_answer_end},
            "token_cap": {"n": c.token_cap, "share": share(c.token_cap)},
            "long_after_answer": {"n": c.long_after_answer, "share": share(c.long_after_answer)},
            "unbalanced_dollar": {"n": c.unbalanced_dollar, "share": share(c.unbalanced_dollar)},
            "without_formula": ({"n": c.without_formula, "share": share(c.without_formula, c.formula_rollouts)}
                                if c.formula_rollouts else None),
            "encoder_window": ({**c.window, "n_rollouts": c.window_rollouts, "n_over_window": c.over_window,
                                "share_over_window": share(c.over_window, c.window_rollouts),
                                "tokens_seen_share": share(c.tokens_seen, c.tokens_total)}
                               if c.window_rollouts else None),
        }
        out["warnings"] = warnings(out)
        return out


def warnings(summary: dict[str, Any]) -> list[str]:
    """The validity warnings of one benchmark's summary (``ValidityCounter.summary``)."""
    out = []
    cap, tail, window = summary["token_cap"], summary["long_after_answer"], summary["encoder_window"]
    cut = summary["solution_cut"]
    if cap["share"] is not None and cap["share"] >= WARN_SHARE:
        out.append(f"{cap['share']:.0%} of rollouts hit the token cap (finish 'length'): their solutions never ended")
    if tail["share"] is not None and tail["share"] >= WARN_SHARE:
        after = ("cut away before measuring" if cut["rule"] != "none"
                 else "MEASURED as part of the solution: --solution-cut none")
        out.append(f"{tail['share']:.0%} of rollouts carry long text after their final answer ({after})")
    if (dollar := summary.get("unbalanced_dollar")) and dollar["share"] is not None and dollar["share"] >= WARN_SHARE:
        out.append(f"{dollar['share']:.0%} of rollouts carry an unbalanced $ in their solution (a dropped closing $; "
                   "the span open at the answer closes where its box begins, issue 42)")
    if (bare := summary.get("without_formula")) and bare["share"] is not None and bare["share"] >= WARN_SHARE:
        out.append(f"{bare['share']:.0%} of rollouts hold no formula the extractor reads ($..$, \\(..\\), ...): "
                   "D_eq counts each 0 (Eq. 8), so it does not see equations written without math delimiters")
    if cut["n_without_answer_end"]:
        out.append(f"{cut['n_without_answer_end']} rollouts were graded before answer ends were recorded and keep "
                   "their whole text: run `dsdr-eval score` again")
    if window is not None and window["share_over_window"] is not None and window["share_over_window"] >= WARN_SHARE:
        seen = window["tokens_seen_share"]
        mode = ("pooled over windows" if window.get("truncation") == "chunk-mean"
                else f"D_emb read {seen:.0%} of their tokens: it compares how solutions begin (--chunked pools windows)")
        out.append(f"{window['share_over_window']:.0%} of rollouts exceed the encoder window "
                   f"({window.get('max_seq_length')} tokens); {mode}")
    return out
