"""Answer diversity: how many different final answers a group produced.

The classes are the math-equivalence classes of the extracted final answers that grading
assigns (``answer_class`` in graded.jsonl: index of the class within its problem; None when no
answer was extracted). Rollouts without an answer are left out of both numbers and counted in
``no_answer_fraction``.

* ``answer_classes``: number of distinct answer classes.
* ``answer_entropy``: Shannon entropy (natural log, nats) of the class proportions among the
  rollouts that have an answer; 0 when all agree, log(K) for K equally frequent answers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AnswerDiversity:
    answer_classes: int          # distinct answer classes (no-answer excluded)
    answer_entropy: float        # nats; NaN when no rollout has an answer
    no_answer_fraction: float    # NaN for an empty group


def answer_diversity(answer_classes: Sequence[int | None]) -> AnswerDiversity:
    answered = [a for a in answer_classes if a is not None]
    total = len(answer_classes)
    no_answer_fraction = (total - len(answered)) / total if total else float("nan")
    if not answered:
        return AnswerDiversity(0, float("nan"), no_answer_fraction)
    counts = np.asarray(list(Counter(answered).values()), dtype=np.float64)
    p = counts / counts.sum()
    entropy = float(-np.sum(p * np.log(p)))
    return AnswerDiversity(len(counts), max(entropy, 0.0), no_answer_fraction)  # no -0.0
