"""Vendi (q = 1, 2, inf), distinct-n, self-BLEU and answer diversity against hand-computed values
and against the reference libraries (vendi-score, sacrebleu)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dsdr_eval.diversity_metrics.answers import answer_diversity
from dsdr_eval.diversity_metrics.lexical import GroupNgrams, distinct_n, self_bleu, tokenize
from dsdr_eval.diversity_metrics.vendi import (
    embedding_kernel,
    hill_number,
    partition_kernel,
    partition_vendi_scores,
    vendi_score,
    vendi_scores,
)


def _random_unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.filterwarnings("ignore:Please import `csr_matrix`:DeprecationWarning")
@pytest.mark.parametrize("q", [1, 2, "inf"])
def test_vendi_matches_the_vendi_score_library(q) -> None:
    from vendi_score import vendi

    for seed, (n, d) in enumerate([(5, 3), (12, 8), (30, 4)]):
        kernel = embedding_kernel(_random_unit_rows(n, d, seed))
        ours = vendi_score(kernel, math.inf if q == "inf" else q)
        assert ours == pytest.approx(float(vendi.score_K(kernel, q=q)), rel=1e-9)
    ids = np.asarray([0, 0, 1, 2, 2, 2])
    assert vendi_score(partition_kernel(ids), math.inf if q == "inf" else q) == pytest.approx(
        float(vendi.score_K(partition_kernel(ids), q=q)), rel=1e-9)


def test_vendi_hand_computed() -> None:
    assert vendi_scores(np.eye(4)) == pytest.approx({"1": 4.0, "2": 4.0, "inf": 4.0})
    assert vendi_scores(np.ones((5, 5))) == pytest.approx({"1": 1.0, "2": 1.0, "inf": 1.0})
    # partition sizes 3 and 1 -> proportions (3/4, 1/4)
    expected = {"1": math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25))),
                "2": 1 / (0.75**2 + 0.25**2), "inf": 4 / 3}
    assert partition_vendi_scores(np.asarray([0, 0, 1, 0])) == pytest.approx(expected)
    assert vendi_scores(partition_kernel(np.asarray([0, 0, 1, 0]))) == pytest.approx(expected)
    assert hill_number(np.asarray([0.5, 0.5]), 3) == pytest.approx(2.0)
    assert math.isnan(vendi_scores(np.zeros((0, 0)))["1"])
    assert vendi_scores(np.ones((1, 1))) == pytest.approx({"1": 1.0, "2": 1.0, "inf": 1.0})


def test_distinct_n_hand_computed() -> None:
    texts = ["a b a", "a b"]
    # unigrams a b a a b -> 2 distinct / 5 ; bigrams (a b) (b a) (a b) -> 2/3 (none across texts)
    assert distinct_n(texts, 1) == pytest.approx(2 / 5)
    assert distinct_n(texts, 2) == pytest.approx(2 / 3)
    assert distinct_n(texts, 3) == pytest.approx(1.0)        # only (a b a)
    assert math.isnan(distinct_n(texts, 4))                   # no 4-gram at all
    assert math.isnan(distinct_n(["", ""], 1))
    assert distinct_n(["x y z"] * 3, 1) == pytest.approx(3 / 9)
    group = GroupNgrams(["a b", "c d", "a b"])
    assert group.distinct_n(1, np.asarray([True, False, True])) == pytest.approx(2 / 4)


def test_self_bleu_matches_sacrebleu_sentence_bleu() -> None:
    import sacrebleu

    texts = ["The cat sat on the mat.", "The cat sat on a mat!", "A dog ran far away from the cat, quickly.",
             "", "the the the the", "So x = 2, and the answer is $\\boxed{2}$.", "The cat sat on the mat."]
    group = GroupNgrams(texts)
    ours = group.self_bleu_per_rollout()

    def reference_bleu(hypothesis: str, references: list[str]) -> float:
        joined = [" ".join(tokenize(r)) for r in references]
        return sacrebleu.sentence_bleu(" ".join(tokenize(hypothesis)), joined, tokenize="none").score / 100

    for i, text in enumerate(texts):
        refs = [t for j, t in enumerate(texts) if j != i]
        assert ours[i] == pytest.approx(reference_bleu(text, refs), abs=1e-12)
    members = np.asarray([True, False, True, True, False, True, False])
    sub = [t for t, m in zip(texts, members) if m]
    ours_sub = group.self_bleu_per_rollout(members)
    assert np.isnan(ours_sub[~members]).all()
    for k, i in enumerate(np.nonzero(members)[0]):
        refs = [t for j, t in enumerate(sub) if j != k]
        assert ours_sub[i] == pytest.approx(reference_bleu(sub[k], refs), abs=1e-12)


def test_a_group_of_long_traces_holds_its_ngrams_in_bounded_memory() -> None:
    """Thinking traces: 64 x 128 KB is ~2.5M tokens per group. The counts held are 4 orders x (gram, owner) x
    4 bytes = 32 B/token, and building them never holds every token string at once (a str is ~50 B)."""
    import random
    import tracemalloc

    rng = random.Random(0)
    words = [f"w{i}" for i in range(5000)] + ["+", "=", "x"]
    texts = [" ".join(rng.choice(words) for _ in range(20000)) for _ in range(16)]
    n_tokens = sum(len(tokenize(t)) for t in texts)
    tracemalloc.start()
    try:
        group = GroupNgrams(texts)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # measured: 32 B/token held and 119 B/token peak (int64 counts and one list of all token strings: 64 and 209)
    assert held / n_tokens < 40 and peak / n_tokens < 160
    small = GroupNgrams(texts[:3])
    assert group.distinct_n(2, np.asarray([True] * 3 + [False] * 13)) == pytest.approx(small.distinct_n(2))


def test_tokenizer() -> None:
    assert tokenize("So $\\frac{1}{2}$, x=3.") == ["So", "$", "\\", "frac", "{", "1", "}", "{", "2", "}", "$",
                                                  ",", "x", "=", "3", "."]
    assert tokenize("") == [] and tokenize(" \n\t ") == []


def test_self_bleu_degenerate_groups() -> None:
    assert math.isnan(self_bleu(["only one"]))
    assert math.isnan(self_bleu([]))
    assert self_bleu(["same words here and there"] * 3) == pytest.approx(1.0)
    assert self_bleu(["", ""]) == pytest.approx(0.0)


def test_answer_diversity() -> None:
    result = answer_diversity([0, 0, 1, None])
    assert result.answer_classes == 2
    assert result.answer_entropy == pytest.approx(-(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3)))
    assert result.no_answer_fraction == pytest.approx(0.25)
    same = answer_diversity([3, 3, 3])
    assert (same.answer_classes, same.answer_entropy, same.no_answer_fraction) == (1, 0.0, 0.0)
    none = answer_diversity([None, None])
    assert none.answer_classes == 0 and math.isnan(none.answer_entropy) and none.no_answer_fraction == 1.0
    assert answer_diversity([0, 1, 2, 3]).answer_entropy == pytest.approx(math.log(4))
