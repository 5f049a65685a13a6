"""DARLING partition (§4): union-find closure, Div with the 0.1 floor, Gini-Simpson, Coverage@N,
the pluggable equivalences (embedding threshold, answer+formula, pair classifier, registry)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dsdr_eval.diversity_metrics.partition import (
    AnswerFormulaEquivalence,
    EmbeddingThresholdEquivalence,
    PairClassifierEquivalence,
    coverage_at_n,
    darling_div,
    darling_partition,
    gini_simpson,
)
from dsdr_eval.equivalence import Equivalence, GroupView
from dsdr_eval.errors import DsdrError
from dsdr_eval.diversity_metrics.partition_methods import EQUIVALENCES, make_equivalence, register_equivalence


def test_union_find_closes_transitively_and_numbers_by_first_member() -> None:
    texts = ["a", "b", "c", "d", "e"]
    linked = {("a", "c"), ("c", "e")}
    ids = darling_partition(texts, lambda x, y: (x, y) in linked or (y, x) in linked)
    assert ids.tolist() == [0, 1, 0, 2, 0]
    adjacency = np.zeros((4, 4), dtype=bool)
    adjacency[3, 1] = True  # one-sided entries count (symmetrised)
    assert darling_partition(["w", "x", "y", "z"], adjacency).tolist() == [0, 1, 2, 1]


def test_pairs_already_joined_are_not_asked_again() -> None:
    calls: list[tuple[str, str]] = []

    def always(a: str, b: str) -> bool:
        calls.append((a, b))
        return True

    ids = darling_partition(["p", "q", "r", "s", "t"], always)
    assert ids.tolist() == [0, 0, 0, 0, 0]
    assert len(calls) == 4  # row 0 joins everything; no later pair is asked


def test_darling_div_hand_computed() -> None:
    # G = 4, classes {0,1,2}, {3}: (4-3)/3 for the big class, (4-1)/3 = 1 for the singleton
    np.testing.assert_allclose(darling_div([0, 0, 0, 1]), [1 / 3, 1 / 3, 1 / 3, 1.0])
    np.testing.assert_allclose(darling_div([0, 0, 0, 0]), [0.1] * 4)           # floor
    np.testing.assert_allclose(darling_div([0, 1, 2]), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(darling_div([0]), [0.1])                         # G = 1
    assert darling_div([]).shape == (0,)
    # 10 rollouts, class of 9: (10-9)/9 = 0.111 > 0.1 ; floor only bites below 0.1
    np.testing.assert_allclose(darling_div([0] * 9 + [1])[:1], [1 / 9])


def test_gini_simpson_hand_computed() -> None:
    assert gini_simpson([0, 0, 0, 1]) == pytest.approx(1 - (9 / 16 + 1 / 16))
    assert gini_simpson([0, 0]) == 0.0
    assert gini_simpson([0, 1, 2, 3]) == pytest.approx(0.75)
    assert np.isnan(gini_simpson([]))


def _brute_force_coverage(class_ids: list[int], n: int) -> float:
    subsets = list(itertools.combinations(range(len(class_ids)), n))
    return float(np.mean([len({class_ids[i] for i in s}) for s in subsets]))


def test_coverage_at_n() -> None:
    ids = [0, 0, 1]  # c = 3, class sizes 2 and 1
    assert coverage_at_n(ids, 1) == pytest.approx(1.0)
    assert coverage_at_n(ids, 2) == pytest.approx(1 + (1 - 1 / 3))  # 5/3
    assert coverage_at_n(ids, 3) == pytest.approx(2.0)
    assert np.isnan(coverage_at_n(ids, 4))
    assert np.isnan(coverage_at_n([], 1))                            # no correct solution
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 4, size=9).tolist()
    for n in range(1, 10):
        assert coverage_at_n(ids, n) == pytest.approx(_brute_force_coverage(ids, n))


def test_embedding_threshold_equivalence_records_threshold() -> None:
    z = np.asarray([[1.0, 0.0], [0.95, np.sqrt(1 - 0.95**2)], [0.0, 1.0]])
    eq = EmbeddingThresholdEquivalence(0.9)
    assert darling_partition(["a", "b", "c"], eq, embeddings=z).tolist() == [0, 0, 1]
    assert darling_partition(["a", "b", "c"], EmbeddingThresholdEquivalence(0.96), embeddings=z).tolist() == [0, 1, 2]
    assert eq.settings() == {"method": "embedding", "threshold": 0.9, "rule": "cosine >= threshold"}
    with pytest.raises(DsdrError):
        EmbeddingThresholdEquivalence(1.5)


def test_answer_formula_equivalence() -> None:
    texts = ["$x=1$ so 1", "$x = 1$ hence 1", "$x=1$ but 2", "$y$ so 1", "no math", "nothing"]
    answers = [0, 0, 1, 0, None, None]
    ids = darling_partition(texts, AnswerFormulaEquivalence(), answer_classes=answers)
    # same answer + same formula set: {0,1}; different answer: 2; different formulas: 3;
    # no answer and no formula twice: {4,5}
    assert ids.tolist() == [0, 0, 1, 2, 3, 3]


def test_answer_formula_without_answer_classes_reads_answers_with_its_profile() -> None:
    # ToRA-style completions: the answer is the program's output, the prose has no box and no number.
    texts = ["print(a)\n```\n```output\n5\n```\nSo that many cars.",
             "print(b)\n```\n```output\n6\n```\nSo that many cars."]
    assert darling_partition(texts, AnswerFormulaEquivalence()).tolist() == [0, 0]  # boxed: no answer twice
    assert darling_partition(texts, AnswerFormulaEquivalence("tool-output")).tolist() == [0, 1]
    assert darling_partition(texts, make_equivalence("answer-formula", extraction="tool-output")).tolist() == [0, 1]
    assert darling_partition(texts, AnswerFormulaEquivalence("tool-output"), answer_classes=[3, 3]).tolist() == [0, 0]
    with pytest.raises(DsdrError, match="unknown extraction profile 'nope'"):
        AnswerFormulaEquivalence("nope")


def test_registry_and_judge_hook() -> None:
    assert {"embedding", "classifier", "answer-formula"} <= set(EQUIVALENCES)
    assert make_equivalence("embedding", threshold=0.8).settings()["threshold"] == 0.8
    assert make_equivalence("embedding:0.7").settings()["threshold"] == 0.7
    with pytest.raises(DsdrError, match="unknown method"):
        make_equivalence("nonsense")
    with pytest.raises(DsdrError, match="PATH"):
        make_equivalence("classifier")

    class FirstLetter(Equivalence):
        name = "first-letter"

        def decide(self, group: GroupView, pairs):
            return [group.texts[i][0] == group.texts[j][0] for i, j in pairs]

    register_equivalence("first-letter-test")(lambda argument, options: FirstLetter())
    try:
        eq = make_equivalence("first-letter-test")
        assert darling_partition(["ab", "ac", "b"], eq).tolist() == [0, 0, 1]
    finally:
        EQUIVALENCES.pop("first-letter-test")


@pytest.fixture(scope="module")
def tiny_classifier_dir(tmp_path_factory, smollm2_dir):
    """A randomly initialised 1-layer Llama pair classifier with the SmolLM2 tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    out = tmp_path_factory.mktemp("pair-classifier")
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=8192, num_labels=2,
                         id2label={0: "different", 1: "similar"}, label2id={"different": 0, "similar": 1},
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    LlamaForSequenceClassification(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.slow  # builds and runs a tiny classifier with the SmolLM2 tokenizer (2-4 s)
def test_pair_classifier_format_and_decisions(tiny_classifier_dir) -> None:
    import torch

    eq = make_equivalence(f"classifier:{tiny_classifier_dir}")
    assert isinstance(eq, PairClassifierEquivalence)
    assert eq.positive_index == 1 and eq.settings()["max_side_tokens"] == 2048
    tok = eq.tokenizer
    a, b = "first solution $x=1$", "second one"
    # the input is exactly "<|im_start|> a <|im_end|> b <|im_end|>" in ids
    ids = eq._prefix + eq._ids(a) + eq._middle + eq._ids(b) + eq._suffix
    assert tok.decode(ids) == f"<|im_start|> {a} <|im_end|> {b} <|im_end|>"
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert ids[0] == im_start and ids.count(im_end) == 2 and ids[-1] == im_end
    with torch.no_grad():
        logits = eq.model(input_ids=torch.tensor([ids])).logits
    expected = torch.softmax(logits, -1)[0, 1].item()
    texts = [a, b, "third text", "a fourth"]
    probs = eq.probabilities([(a, b), (b, a), (texts[2], texts[3])])  # padded batch
    assert probs[0] == pytest.approx(expected, abs=1e-5)
    # decisions are P(similar) > 0.5 closed by union-find
    all_pairs = [(i, j) for i in range(4) for j in range(i + 1, 4)]
    p = dict(zip(all_pairs, eq.probabilities([(texts[i], texts[j]) for i, j in all_pairs])))
    adjacency = np.zeros((4, 4), dtype=bool)
    for (i, j), value in p.items():
        adjacency[i, j] = value > 0.5
    assert darling_partition(texts, eq).tolist() == darling_partition(texts, adjacency).tolist()


@pytest.mark.slow  # builds and runs a tiny classifier with the SmolLM2 tokenizer (2-4 s)
def test_pair_classifier_cuts_each_side(tiny_classifier_dir) -> None:
    import torch

    eq = PairClassifierEquivalence(str(tiny_classifier_dir), max_side_tokens=5)
    long_a = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    cut_a = eq.tokenizer.decode(eq._ids(long_a)[:5])
    assert eq.probabilities([(long_a, "b")])[0] == pytest.approx(eq.probabilities([(cut_a, "b")])[0], abs=1e-5)
    # a head that outputs equal logits gives P = 0.5, which is NOT > 0.5: no pair joins
    with torch.no_grad():
        eq.model.score.weight.zero_()
    assert darling_partition(["x", "y", "z"], eq).tolist() == [0, 1, 2]


def test_classifier_bad_path_is_a_user_error(tmp_path) -> None:
    with pytest.raises(DsdrError, match="cannot load"):
        make_equivalence(f"classifier:{tmp_path / 'missing'}")


@pytest.mark.slow  # builds and runs a tiny classifier with the SmolLM2 tokenizer (2-4 s)
def test_classifier_partition_on_a_run(tmp_path, tiny_classifier_dir) -> None:
    from dsdr_eval.diversity_metrics.run import compute_run_diversity
    from dsdr_eval.rundir.jsonl import read_jsonl, write_jsonl

    texts = ["$a$ first", "$b$ second", "third $c$", "$a$ first again"]
    write_jsonl(tmp_path / "graded.jsonl", [
        {"problem_id": "p", "sample_idx": i, "gold": "1", "completion": t, "correct": i < 3,
         "status": "correct" if i < 3 else "incorrect", "answer_class": 0}
        for i, t in enumerate(texts)])

    class Flat:
        def encode(self, batch):
            return np.ones((len(batch), 4))

    # A random classifier says ~0.53 for every pair; a threshold at the median pair probability
    # gives a non-trivial partition (and checks that --threshold reaches the classifier).
    probe = PairClassifierEquivalence(str(tiny_classifier_dir))
    pairs = [(texts[i], texts[j]) for i in range(4) for j in range(i + 1, 4)]
    threshold = float(np.median(probe.probabilities(pairs)))
    classifier = make_equivalence(f"classifier:{tiny_classifier_dir}", threshold=threshold)
    result = compute_run_diversity(tmp_path, encoder=Flat(), equivalence=classifier, progress=False)
    settings = result["default"]["settings"]["partition"]
    assert settings["method"] == "classifier" and settings["path"] == str(tiny_classifier_dir)
    assert settings["probability_threshold"] == threshold
    reference = PairClassifierEquivalence(str(tiny_classifier_dir), probability_threshold=threshold)
    expected = darling_partition(texts, reference)
    assert 1 < expected.max() + 1 < 4  # neither all-equal nor all-distinct
    samples = read_jsonl(tmp_path / "diversity_per_sample.jsonl")
    assert [s["class_id"] for s in samples] == expected.tolist()
    expected_correct = darling_partition(texts[:3], reference)
    assert [s["class_id_correct"] for s in samples[:3]] == expected_correct.tolist()
