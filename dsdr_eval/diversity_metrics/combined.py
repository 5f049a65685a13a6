"""The DSDR global diversity score d_i (DSDR, arXiv 2602.19895; docs/ALGORITHMS.md §3.1, Eq. 9).

``d_i = (D_emb(o_i) + D_eq(o_i)) / 2`` for every rollout of one group. This is the single
implementation (``dsdr_from_parts``): the trainer (reward bonus, docs/ALGORITHMS.md §3.2) and the
evaluation (``compute_run_diversity``) both call it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dsdr_eval.diversity_metrics.formula import formula_set, formula_uniqueness
from dsdr_eval.diversity_metrics.semantic import (
    embed_texts, load_encoder, normalize_rows, semantic_diversity, semantic_diversity_from_similarities,
)
from dsdr_eval.diversity_metrics._blas import single_threaded_blas


@dataclass(frozen=True)
class DsdrDiversity:
    """Per-rollout diversity of one group. Every array is float64/int64 [G]."""

    d_emb: np.ndarray      # semantic term, in [0, 1]
    d_eq: np.ndarray       # formula term, in [0, 1]
    d: np.ndarray          # (d_emb + d_eq) / 2
    n_formulas: np.ndarray  # |S(o_i)|, distinct normalised formulas per rollout


def dsdr_from_parts(embeddings: np.ndarray, formula_sets: Sequence[frozenset[str]], *,
                    similarities: np.ndarray | None = None) -> DsdrDiversity:
    """d for one group from precomputed unit-norm embeddings [G, D] and formula sets
    (docs/ALGORITHMS.md §3.1, Eq. 9: the mean of Eq. 7 and Eq. 8).

    ``similarities`` [G, G] = embeddings @ embeddings.T, when the caller already has it."""
    d_emb = (semantic_diversity(embeddings) if similarities is None
             else semantic_diversity_from_similarities(similarities))
    d_eq = formula_uniqueness(formula_sets)
    n_formulas = np.asarray([len(s) for s in formula_sets], dtype=np.int64)
    return DsdrDiversity(d_emb=d_emb, d_eq=d_eq, d=(d_emb + d_eq) / 2.0, n_formulas=n_formulas)


def dsdr_diversity(texts: list[str], *, encoder: Any = None,
                   embeddings: np.ndarray | None = None) -> DsdrDiversity:
    """DSDR d_i for the G rollouts of ONE group (docs/ALGORITHMS.md §3.1, Eq. 9, via ``dsdr_from_parts``).

    encoder: an ``Encoder`` from ``load_encoder`` or any object with ``encode(list[str]) ->
    [N, D]``; None loads the default all-MiniLM-L6-v2 (cached). ``embeddings`` [G, D], when
    given, are used instead of encoding (rows are re-normalised).
    Degenerate groups: G = 1 gives d_emb = d_eq = 0; an empty text has no formula (d_eq = 0)."""
    texts = [t if isinstance(t, str) else "" for t in texts]
    if embeddings is None:
        embeddings = embed_texts(texts, encoder if encoder is not None else load_encoder())
    else:
        embeddings = embed_texts_from_array(embeddings, len(texts))
    return dsdr_from_parts(embeddings, [formula_set(t) for t in texts])


def dsdr_diversity_batch(texts: list[str], group_ids: Sequence[Hashable], *, encoder: Any = None,
                         progress: bool = False, formula_rules: str = "extended",
                         ends_at_answer: Sequence[bool] | None = None) -> DsdrDiversity:
    """d_i for many groups at once: ONE batched encode of all texts, then one product per group.

    texts[k] belongs to group group_ids[k] (any hashable; rollouts of one group need not be
    contiguous); ``ends_at_answer[k]``: texts[k] was cut at its graded final answer
    (``solution.cut_at_answer``: its formula spans close there). Returns arrays aligned with ``texts`` [N]."""
    if len(group_ids) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(group_ids)} group ids")
    texts = [t if isinstance(t, str) else "" for t in texts]
    embeddings = embed_texts(texts, encoder if encoder is not None else load_encoder(),
                             progress=progress)
    ends = [False] * len(texts) if ends_at_answer is None else list(ends_at_answer)
    sets = [formula_set(t, rules=formula_rules, ends_at_answer=e) for t, e in zip(texts, ends)]
    n = len(texts)
    out = DsdrDiversity(d_emb=np.zeros(n), d_eq=np.zeros(n), d=np.zeros(n), n_formulas=np.zeros(n, dtype=np.int64))
    members: dict[Hashable, list[int]] = {}
    for index, gid in enumerate(group_ids):
        members.setdefault(gid, []).append(index)
    with single_threaded_blas():  # many tiny products: threads only add overhead
        for index_list in members.values():
            rows = np.asarray(index_list, dtype=np.int64)
            part = dsdr_from_parts(embeddings[rows], [sets[i] for i in index_list])
            for name in ("d_emb", "d_eq", "d", "n_formulas"):
                getattr(out, name)[rows] = getattr(part, name)
    return out


def embed_texts_from_array(embeddings: Any, expected_rows: int) -> np.ndarray:
    """Validate and unit-normalise precomputed embeddings (numpy or torch) [G, D]."""
    if hasattr(embeddings, "detach"):
        embeddings = embeddings.detach().cpu().numpy()
    array = np.asarray(embeddings, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] != expected_rows:
        raise ValueError(f"embeddings of shape {array.shape} for {expected_rows} texts")
    return normalize_rows(array)
