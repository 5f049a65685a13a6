"""Vendi scores of order q (Friedman & Dieng, "The Vendi Score", TMLR 2023;
Pasarkar & Dieng 2023 for orders q != 1).

For a similarity kernel K [n, n] with K_ii = 1, let lambda be the eigenvalues of K / n (they sum
to 1). The Vendi score of order q is the Hill number (exponential of the Renyi entropy) of lambda:

* q = 1:   exp(-sum lambda_i log lambda_i)
* q = 2:   1 / sum lambda_i^2
* q = inf: 1 / max lambda_i
* other q: (sum lambda_i^q)^(1 / (1 - q))

It ranges from 1 (all items identical) to n (all orthogonal). vendi-score 0.0.3's ``score_X``
ignores q, hence these few lines; they follow ``vendi_score.vendi.score_K`` (eigenvalues
<= 0, i.e. numerical noise of a PSD kernel, are dropped) and are tested against it.

Kernels used here: the embedding kernel ``K = Z Z^T`` (cosine of unit-norm embeddings; a Gram
matrix, hence PSD) and the partition kernel ``K_ij = 1[class_i == class_j]`` (block diagonal;
its Vendi score is the Hill number of the class proportions).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dsdr_eval.diversity_metrics._blas import single_threaded_blas

VENDI_ORDERS: tuple[float, ...] = (1.0, 2.0, math.inf)


def order_key(q: float) -> str:
    """JSON key of an order: "1", "2", "inf"."""
    return "inf" if math.isinf(q) else f"{q:g}"


def hill_number(probabilities: np.ndarray, q: float) -> float:
    """Hill number of order q of a probability vector (non-positive entries are dropped)."""
    p = np.asarray(probabilities, dtype=np.float64)
    p = p[p > 0]
    if p.size == 0:
        return float("nan")
    if math.isinf(q):
        return float(1.0 / p.max())
    if q == 1:
        return float(np.exp(-np.sum(p * np.log(p))))
    return float(np.sum(p ** q) ** (1.0 / (1.0 - q)))


def _kernel_eigenvalues(kernel: np.ndarray) -> np.ndarray | None:
    """Eigenvalues of K / n [n] (they sum to 1); None for an empty kernel."""
    kernel = np.asarray(kernel, dtype=np.float64)
    n = kernel.shape[0]
    if n == 0:
        return None
    with single_threaded_blas():
        return np.linalg.eigvalsh(kernel / n)


def vendi_score(kernel: np.ndarray, q: float = 1.0) -> float:
    """Vendi score of order q of a PSD similarity kernel with unit diagonal. NaN when n = 0."""
    eigenvalues = _kernel_eigenvalues(kernel)
    return float("nan") if eigenvalues is None else hill_number(eigenvalues, q)


def vendi_scores(kernel: np.ndarray, orders: Sequence[float] = VENDI_ORDERS) -> dict[str, float]:
    """All orders from ONE eigendecomposition: {"1": .., "2": .., "inf": ..}."""
    eigenvalues = _kernel_eigenvalues(kernel)
    return {order_key(q): float("nan") if eigenvalues is None else hill_number(eigenvalues, q) for q in orders}


def embedding_kernel(embeddings: np.ndarray, *, similarities: np.ndarray | None = None) -> np.ndarray:
    """Cosine kernel ``Z Z^T`` of unit-norm rows [n, D] -> [n, n]; a zero row gets K_ii = 1.
    ``similarities`` (= Z Z^T, when the caller has it) avoids a second product."""
    if similarities is None:
        z = np.asarray(embeddings, dtype=np.float64)
        with single_threaded_blas():
            similarities = z @ z.T
    kernel = np.array(similarities, dtype=np.float64, copy=True)
    np.fill_diagonal(kernel, 1.0)
    return kernel


def partition_kernel(class_ids: np.ndarray) -> np.ndarray:
    """``K_ij = 1[class_i == class_j]`` [n, n]."""
    class_ids = np.asarray(class_ids)
    return (class_ids[:, None] == class_ids[None, :]).astype(np.float64)


def partition_vendi_scores(class_ids: np.ndarray, orders: Sequence[float] = VENDI_ORDERS) -> dict[str, float]:
    """Vendi of the partition kernel without an eigendecomposition: the eigenvalues of K/n are
    the class proportions (one eigenvalue |c|/n per class, the rest 0)."""
    class_ids = np.asarray(class_ids, dtype=np.int64)
    if class_ids.size == 0:
        return {order_key(q): float("nan") for q in orders}
    proportions = np.bincount(class_ids) / class_ids.size
    return {order_key(q): hill_number(proportions, q) for q in orders}
