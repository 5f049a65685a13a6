"""Partition diversity (DARLING, arXiv 2509.02534; docs/ALGORITHMS.md §4;
NoveltyBench-style equivalence classes).

A group of G rollouts is partitioned into equivalence classes: pairwise "same strategy / same
meaning" decisions closed transitively with union-find. The pair decision is pluggable
(``dsdr_eval.equivalence.Equivalence``; ``dsdr_eval.diversity_metrics.partition_methods`` builds one by name):

* ``embedding`` (default): cosine of the unit-norm sentence embeddings >= threshold
  (default ``DEFAULT_COSINE_THRESHOLD``; recorded).
* ``classifier:PATH``: a learned pair classifier loaded with transformers
  ``AutoModelForSequenceClassification`` (DARLING's math classifier is a fine-tuned
  Qwen3-Embedding-4B); input ``<|im_start|> a <|im_end|> b <|im_end|>``, each side cut to 2048
  tokens, equivalent iff P(similar) > 0.5.
* ``answer-formula``: identical final-answer class AND identical formula set.
* ``judge``: the LLM judge (``dsdr_eval.llm_judge.equivalence``).

Outputs per group: class ids, the number of classes, DARLING's per-rollout
``Div(o_i) = (G - |class(o_i)|) / (G - 1)`` floored at 0.1, and the Gini-Simpson index
``1 - sum_k p_k^2`` of the class proportions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dsdr_eval.diversity_metrics._blas import single_threaded_blas
from dsdr_eval.equivalence import Equivalence, GroupView, PairFunctionEquivalence
from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.extraction import DEFAULT_EXTRACTION, extract_answer, get_profile

DEFAULT_COSINE_THRESHOLD = 0.9
DARLING_DIV_FLOOR = 0.1
CLASSIFIER_MAX_SIDE_TOKENS = 2048
CLASSIFIER_PROBABILITY_THRESHOLD = 0.5


class UnionFind:
    """Disjoint sets over 0..n-1 with path halving and union by size."""

    def __init__(self, n: int):
        self.parent = list(range(n))
        self.size = [1] * n

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if self.size[ra] < self.size[rb]:
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.size[ra] += self.size[rb]
        return True

    def labels(self) -> np.ndarray:
        """Class ids numbered 0, 1, ... in order of each class's first member. int64 [n]."""
        roots = [self.find(i) for i in range(len(self.parent))]
        first_seen: dict[int, int] = {}
        return np.asarray([first_seen.setdefault(r, len(first_seen)) for r in roots], dtype=np.int64)


def canonical_labels(labels: Sequence[int] | np.ndarray) -> np.ndarray:
    """Renumber arbitrary class labels 0, 1, ... in order of first appearance. int64 [G]."""
    first_seen: dict[Any, int] = {}
    return np.asarray([first_seen.setdefault(label, len(first_seen)) for label in labels], dtype=np.int64)


def partition_from_adjacency(adjacency: np.ndarray) -> np.ndarray:
    """Connected components (= union-find closure) of a bool [G, G] graph. int64 [G]."""
    adjacency = np.asarray(adjacency, dtype=bool)
    group_size = adjacency.shape[0]
    if adjacency.shape != (group_size, group_size):
        raise ValueError(f"adjacency must be square, got {adjacency.shape}")
    if group_size == 0:
        return np.zeros(0, dtype=np.int64)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    _, labels = connected_components(csr_matrix(adjacency | adjacency.T), directed=False)
    return canonical_labels(labels)


def darling_partition(texts: Sequence[str], equivalent: Any, *,
                      embeddings: np.ndarray | None = None,
                      answer_classes: Sequence[int | None] | None = None,
                      formula_sets: Sequence[frozenset[str]] | None = None,
                      problem: str | None = None,
                      similarities: np.ndarray | None = None) -> np.ndarray:
    """Class id per rollout (int64 [G], numbered by first appearance) — DARLING, docs/ALGORITHMS.md §4.

    equivalent: an ``Equivalence``; a plain ``(text_a, text_b) -> bool`` function; or a
    precomputed bool [G, G] matrix. Pair decisions are closed transitively (union-find)."""
    group_size = len(texts)
    if isinstance(equivalent, np.ndarray):
        return partition_from_adjacency(equivalent)
    if not isinstance(equivalent, Equivalence):
        if not callable(equivalent):
            raise TypeError("equivalent must be an Equivalence, a (a, b) -> bool function or a bool matrix")
        equivalent = PairFunctionEquivalence(equivalent)
    group = GroupView(texts=list(texts), embeddings=embeddings, answer_classes=answer_classes,
                      formula_sets=formula_sets, problem=problem, similarities=similarities)
    adjacency = equivalent.adjacency(group)
    if adjacency is not None:
        return partition_from_adjacency(adjacency)
    union_find = UnionFind(group_size)
    for i in range(group_size):
        # Ask only for pairs not already joined: the closure is the same, the calls fewer.
        pairs = [(i, j) for j in range(i + 1, group_size) if union_find.find(i) != union_find.find(j)]
        if not pairs:
            continue
        decisions = list(equivalent.decide(group, pairs))
        if len(decisions) != len(pairs):
            raise RuntimeError(f"{type(equivalent).__name__}.decide returned {len(decisions)} "
                               f"decisions for {len(pairs)} pairs")
        for (a, b), same in zip(pairs, decisions):
            if same:
                union_find.union(a, b)
    return union_find.labels()


def class_sizes(class_ids: np.ndarray) -> np.ndarray:
    """Size of each class, indexed by class id. int64 [K]."""
    class_ids = np.asarray(class_ids, dtype=np.int64)
    return np.bincount(class_ids) if class_ids.size else np.zeros(0, dtype=np.int64)


def darling_div(class_ids: Sequence[int] | np.ndarray, *, floor: float = DARLING_DIV_FLOOR) -> np.ndarray:
    """DARLING ``Div(o_i) = (G - |class(o_i)|) / (G - 1)``, floored at ``floor`` (0.1). float64 [G].
    (docs/ALGORITHMS.md §4, Eq. 15.)

    A group of one (G - 1 = 0) gets the floor: it has no other rollout to differ from."""
    class_ids = np.asarray(class_ids, dtype=np.int64)
    group_size = class_ids.size
    if group_size == 0:
        return np.zeros(0, dtype=np.float64)
    if group_size == 1:
        return np.full(1, float(floor))
    own_class_size = class_sizes(class_ids)[class_ids]
    return np.maximum((group_size - own_class_size) / (group_size - 1), float(floor))


def gini_simpson(class_ids: Sequence[int] | np.ndarray) -> float:
    """``1 - sum_k p_k^2`` over class proportions (probability that two draws WITH replacement
    fall in different classes). 0 for one class; NaN for an empty group."""
    sizes = class_sizes(np.asarray(class_ids, dtype=np.int64))
    total = sizes.sum()
    if total == 0:
        return float("nan")
    p = sizes / total
    return float(1.0 - np.sum(p * p))


# ----------------------------------------------------------------------------- equivalences

class EmbeddingThresholdEquivalence(Equivalence):
    """Equivalent iff cosine(z_a, z_b) >= threshold on unit-norm sentence embeddings."""

    name = "embedding"

    def __init__(self, threshold: float = DEFAULT_COSINE_THRESHOLD, encoder: Any = None):
        if not -1.0 <= threshold <= 1.0:
            raise DsdrError(f"--threshold {threshold}: a cosine threshold must be in [-1, 1]")
        self.threshold = float(threshold)
        self.encoder = encoder

    def settings(self) -> dict[str, Any]:
        return {"method": self.name, "threshold": self.threshold, "rule": "cosine >= threshold"}

    def adjacency(self, group: GroupView) -> np.ndarray:
        if group.similarities is not None:
            return np.asarray(group.similarities) >= self.threshold
        embeddings = group.embeddings
        if embeddings is None:
            from dsdr_eval.diversity_metrics.semantic import embed_texts, load_encoder

            embeddings = embed_texts(group.texts, self.encoder if self.encoder is not None else load_encoder())
        z = np.asarray(embeddings, dtype=np.float64)
        with single_threaded_blas():
            return (z @ z.T) >= self.threshold


class AnswerFormulaEquivalence(Equivalence):
    """Equivalent iff the same final-answer class (None = no answer, a class of its own) AND
    the same formula set. Without ``answer_classes`` the answer string extracted with
    ``extraction`` (a profile of ``dsdr_eval.grading.extraction``) is used.

    Graded runs never take that path: ``compute_run_diversity`` and ``dsdr_train.scoring`` pass
    graded.jsonl's / the reward grader's ``answer_class`` per rollout (a list, never None), which
    the run's own profile produced. A library caller grouping raw texts names the profile here, so
    a tool-output or gsm8k completion is not read with the boxed default."""

    name = "answer-formula"

    def __init__(self, extraction: str = DEFAULT_EXTRACTION) -> None:
        self.extraction = get_profile(extraction).name  # unknown names fail here, not per group

    def settings(self) -> dict[str, Any]:
        return {"method": self.name,
                "rule": "same answer_class (no answer counts as one value) and identical formula set"}

    def adjacency(self, group: GroupView) -> np.ndarray:
        from dsdr_eval.diversity_metrics.formula import formula_set

        answers: Sequence[Any] | None = group.answer_classes
        if answers is None:
            answers = [extract_answer(t, self.extraction) for t in group.texts]
        sets = group.formula_sets if group.formula_sets is not None else [formula_set(t) for t in group.texts]
        keys = canonical_labels([(a, s) for a, s in zip(answers, sets)])
        return keys[:, None] == keys[None, :]


class PairClassifierEquivalence(Equivalence):
    """A learned pair classifier (DARLING's equivalence model, arXiv 2509.02534; docs/ALGORITHMS.md §4).

    Input ids: ``<|im_start|> `` + a[:2048 tokens] + `` <|im_end|> `` + b[:2048 tokens] +
    `` <|im_end|>`` (each side tokenised once, cut, then concatenated, so the cut is exact);
    equivalent iff P(similar) > 0.5. P(similar) = sigmoid(logit) for a one-logit head, else the
    softmax probability of the label named similar/equivalent/same/yes/positive/true/1, or of
    label index 1 when no label has such a name."""

    name = "classifier"
    _POSITIVE_NAMES = ("similar", "equivalent", "same", "yes", "positive", "true", "1", "label_1")

    def __init__(self, path: str, *, device: str = "cpu", batch_size: int = 8,
                 max_side_tokens: int = CLASSIFIER_MAX_SIDE_TOKENS,
                 probability_threshold: float = CLASSIFIER_PROBABILITY_THRESHOLD):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32)
        except Exception as exc:  # noqa: BLE001 - a bad path is a user error
            raise DsdrError(f"classifier {path!r}: cannot load it with AutoModelForSequenceClassification "
                            f"({type(exc).__name__}: {exc})") from exc
        self.model.to(device).eval()
        self.path = str(path)
        self.device = device
        self.batch_size = batch_size
        self.max_side_tokens = max_side_tokens
        self.probability_threshold = probability_threshold
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
        if getattr(self.model.config, "pad_token_id", None) is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.positive_index = self._positive_index()
        self._prefix = self._ids("<|im_start|> ")
        self._middle = self._ids(" <|im_end|> ")
        self._suffix = self._ids(" <|im_end|>")

    def _ids(self, text: str) -> list[int]:
        from dsdr_eval.rundir.samples import clean_text

        return list(self.tokenizer(clean_text(text), add_special_tokens=False)["input_ids"])

    def _positive_index(self) -> int | None:
        if self.model.config.num_labels == 1:
            return None
        for index, label in sorted((self.model.config.id2label or {}).items()):
            if str(label).strip().lower() in self._POSITIVE_NAMES:
                return int(index)
        return 1

    def settings(self) -> dict[str, Any]:
        return {"method": self.name, "path": self.path, "max_side_tokens": self.max_side_tokens,
                "probability_threshold": self.probability_threshold,
                "positive_label_index": self.positive_index,
                "input_format": "<|im_start|> a <|im_end|> b <|im_end|>"}

    def probabilities(self, pairs_of_texts: Sequence[tuple[str, str]]) -> np.ndarray:
        """P(similar) for each (a, b). float64 [P]."""
        import torch

        side_ids: dict[str, list[int]] = {}

        def cut(text: str) -> list[int]:
            if text not in side_ids:
                side_ids[text] = self._ids(text)[: self.max_side_tokens]
            return side_ids[text]

        out = np.zeros(len(pairs_of_texts), dtype=np.float64)
        for start in range(0, len(pairs_of_texts), self.batch_size):
            batch = pairs_of_texts[start:start + self.batch_size]
            features = [{"input_ids": self._prefix + cut(a) + self._middle + cut(b) + self._suffix}
                        for a, b in batch]
            padded = self.tokenizer.pad(features, return_tensors="pt")
            with torch.no_grad():
                logits = self.model(input_ids=padded["input_ids"].to(self.device),
                                    attention_mask=padded["attention_mask"].to(self.device)).logits.float()
            if self.positive_index is None:
                probs = torch.sigmoid(logits[:, 0])
            else:
                probs = torch.softmax(logits, dim=-1)[:, self.positive_index]
            out[start:start + len(batch)] = probs.cpu().numpy()
        return out

    def decide(self, group: GroupView, pairs: Sequence[tuple[int, int]]) -> list[bool]:
        texts = group.texts
        probs = self.probabilities([(texts[i], texts[j]) for i, j in pairs])
        return [bool(p > self.probability_threshold) for p in probs]


# ----------------------------------------------------------------------------- coverage

def coverage_at_n(class_ids: Sequence[int] | np.ndarray, n: int) -> float:
    """Coverage@N of a partition of the c correct solutions of one problem.

    Definition: the expected number of distinct classes among N correct solutions drawn uniformly
    WITHOUT replacement from the c correct ones (all C(c, N) subsets equally likely) — the
    unbiased, order-free analogue of "how many distinct correct strategies does N-sampling find"
    (cf. the unbiased pass@k estimator). With class sizes m_k:

        Coverage@N = sum_k [1 - C(c - m_k, N) / C(c, N)]

    ``C(c - m, N) / C(c, N) = prod_{i=0}^{N-1} (c - m - i) / (c - i)`` (0 when c - m < N).
    Coverage@c = number of classes; Coverage@1 = 1. NaN when N > c (including c = 0)."""
    class_ids = np.asarray(class_ids, dtype=np.int64)
    c = class_ids.size
    if n < 1:
        raise ValueError(f"Coverage@N needs N >= 1, got {n}")
    if n > c:
        return float("nan")
    steps = np.arange(n, dtype=np.float64)
    coverage = 0.0
    for m in class_sizes(class_ids):
        if c - m < n:
            coverage += 1.0
        else:
            coverage += 1.0 - float(np.prod((c - m - steps) / (c - steps)))
    return coverage
