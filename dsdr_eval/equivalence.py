"""The pairwise equivalence of DARLING partitions: the interface every method implements.

A leaf module (numpy only): ``dsdr_eval.diversity_metrics.partition`` (the partition metrics and the
embedding / classifier / answer-formula methods) and ``dsdr_eval.llm_judge.equivalence`` (the LLM
judge) both build on it, and ``dsdr_eval.diversity_metrics.partition_methods`` builds any of them by name. Nothing
here imports either side, so neither can close an import circle through it.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class GroupView:
    """What an equivalence function may look at for one group (every field aligned, length G)."""

    texts: Sequence[str]
    embeddings: np.ndarray | None = None            # [G, D] unit-norm rows
    answer_classes: Sequence[int | None] | None = None
    formula_sets: Sequence[frozenset[str]] | None = None
    problem: str | None = None                      # the prompt's problem text (for a judge)
    similarities: np.ndarray | None = None          # [G, G] embeddings @ embeddings.T, if known
    extra: dict[str, Any] = field(default_factory=dict)


class Equivalence(abc.ABC):
    """A pairwise equivalence decision. Implement ``adjacency`` when every pair is cheap (one
    vectorised [G, G] call), otherwise ``decide`` for a batch of pairs: the union-find driver then
    only asks for pairs whose rollouts are not already in one class."""

    name: str = "equivalence"

    def settings(self) -> dict[str, Any]:
        return {"method": self.name}

    def adjacency(self, group: GroupView) -> np.ndarray | None:
        """bool [G, G] (symmetric; diagonal ignored), or None to fall back on ``decide``."""
        return None

    def decide(self, group: GroupView, pairs: Sequence[tuple[int, int]]) -> Sequence[bool]:
        raise NotImplementedError(f"{type(self).__name__} implements neither adjacency nor decide")

    def close(self) -> None:
        """Release what the method holds (an HTTP client, a model); the default holds nothing."""


class PairFunctionEquivalence(Equivalence):
    """Wraps a plain ``(text_a, text_b) -> bool`` function."""

    name = "function"

    def __init__(self, function: Callable[[str, str], bool]):
        self.function = function

    def settings(self) -> dict[str, Any]:
        return {"method": self.name, "function": getattr(self.function, "__qualname__", repr(self.function))}

    def decide(self, group: GroupView, pairs: Sequence[tuple[int, int]]) -> list[bool]:
        return [bool(self.function(group.texts[i], group.texts[j])) for i, j in pairs]


class CachedEquivalence(Equivalence):
    """Memoises ``decide`` by text pair, so re-partitioning a subset (the correct rollouts)
    does not pay twice for an expensive classifier or judge."""

    def __init__(self, inner: Equivalence):
        self.inner = inner
        self.name = inner.name
        self._cache: dict[tuple[str, str], bool] = {}

    def settings(self) -> dict[str, Any]:
        return self.inner.settings()

    def adjacency(self, group: GroupView) -> np.ndarray | None:
        return self.inner.adjacency(group)

    def decide(self, group: GroupView, pairs: Sequence[tuple[int, int]]) -> list[bool]:
        texts = group.texts
        missing = [(i, j) for i, j in pairs if (texts[i], texts[j]) not in self._cache]
        if missing:
            for (i, j), same in zip(missing, self.inner.decide(group, missing)):
                self._cache[(texts[i], texts[j])] = bool(same)
        return [self._cache[(texts[i], texts[j])] for i, j in pairs]

    def clear(self) -> None:
        self._cache.clear()

    def close(self) -> None:
        self.inner.close()


__all__ = ["CachedEquivalence", "Equivalence", "GroupView", "PairFunctionEquivalence"]
