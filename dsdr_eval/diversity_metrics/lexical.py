"""Lexical diversity of a group: distinct-n (Li et al., NAACL 2016) and self-BLEU
(Zhu et al., "Texygen", SIGIR 2018).

Tokenisation (both metrics): ``\\w+|[^\\w\\s]`` — runs of word characters, and every other
non-space character as a token of its own. (sacrebleu's ``13a`` tokenizer was measured at
~1.7 ms per 1.2 k-character text on the loaded dev box, i.e. about a minute for 500 x 64 texts;
this regex is one linear pass.)

* ``distinct-n`` = (number of distinct n-grams) / (number of n-grams), pooled over the rollouts
  of the group (n-grams never cross a rollout boundary). NaN when the group has no n-gram.
* ``self-BLEU`` = mean over rollouts i of sentence-BLEU(hypothesis o_i, references {o_j, j != i}),
  exactly sacrebleu's ``sentence_bleu`` (max order 4, 'exp' smoothing, effective order, closest
  reference length, ties to the shorter), reported as a fraction in [0, 1] (sacrebleu prints
  0-100) — equal to ``sacrebleu.sentence_bleu(" ".join(tokens), [...], tokenize="none")``.
  Higher = LESS diverse. NaN for a group of fewer than 2 rollouts.

Speed: calling ``sentence_bleu`` G times with G-1 references re-counts every reference
G-1 times (O(G^2) text passes per group). Here each rollout is tokenised and its n-grams are
counted once, as integer ids with numpy; a hypothesis's clipped count against the union of the
*other* rollouts is ``min(count_i(g), max_{j != i} count_j(g))``, and that maximum is the top
count of g unless rollout i holds it, then the second-highest — so O(total n-grams) per group.
The final BLEU formula is sacrebleu's own ``BLEU.compute_bleu``; tests compare with
``sacrebleu.sentence_bleu(..., tokenize="none")`` on the same tokens.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_NGRAM_ORDER = 4
DISTINCT_ORDERS: tuple[int, ...] = (1, 2, 3, 4)
TOKENIZER = r"regex \w+|[^\w\s] (words; each punctuation/symbol character alone)"


_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Word tokens: runs of word characters, and every other non-space character on its own
    (``\\frac{1}{2}`` -> ``\\ frac { 1 } { 2 }``). One linear regex pass."""
    return _TOKEN.findall(text)


@dataclass(frozen=True)
class _Order:
    # int32, half of int64's memory (4 orders of a group of long traces are held at once); both are
    # below 2**31: a gram id is dense (< the group's token count), an owner < G
    gram: np.ndarray   # int32 [P]: n-gram id (dense within the group)
    owner: np.ndarray  # int32 [P]: rollout index of each n-gram occurrence


class GroupNgrams:
    """Token n-grams (orders 1..4) of one group, counted once, evaluable on any subset."""

    def __init__(self, texts: Sequence[str]):
        # Token ids in order of first appearance, one text at a time: a group's token strings are never
        # all alive at once (64 thinking traces of 128 KB are ~2.5M tokens, ~150 MB as Python strings).
        vocab: dict[str, int] = {}
        per_text = []
        for text in texts:
            tokens = tokenize(text if isinstance(text, str) else "")
            per_text.append(np.fromiter((vocab.setdefault(tok, len(vocab)) for tok in tokens), dtype=np.int64,
                                        count=len(tokens)))
        self.group_size = len(per_text)
        self.lengths = np.asarray([a.size for a in per_text], dtype=np.int64)
        ids = np.concatenate(per_text) if per_text else np.zeros(0, np.int64)
        del per_text
        owner = np.repeat(np.arange(self.group_size, dtype=np.int64), self.lengths)
        self.orders: list[_Order] = []
        n_tokens = ids.size
        keys = ids
        base = max(len(vocab), 1)
        for n in range(1, MAX_NGRAM_ORDER + 1):
            if n_tokens - n + 1 <= 0:
                self.orders.append(_Order(np.zeros(0, np.int32), np.zeros(0, np.int32)))
                continue
            if n > 1:
                # keys[p] identifies the (n-1)-gram starting at p; extend by the token at p+n-1 and
                # re-densify so the product never overflows int64.
                combined = keys[: n_tokens - n + 1] * base + ids[n - 1:]
                _, keys = np.unique(combined, return_inverse=True)
                keys = keys.astype(np.int64)
            inside = owner[: n_tokens - n + 1] == owner[n - 1:]  # not across a rollout boundary
            self.orders.append(_Order(keys[inside].astype(np.int32), owner[: n_tokens - n + 1][inside].astype(np.int32)))

    def distinct_n(self, n: int, members: np.ndarray | None = None) -> float:
        """Distinct n-grams / n-grams over the rollouts in ``members`` (bool [G]; None = all)."""
        order = self.orders[n - 1]
        grams = order.gram if members is None else order.gram[members[order.owner]]
        if grams.size == 0:
            return float("nan")
        return float(np.unique(grams).size / grams.size)

    def self_bleu_per_rollout(self, members: np.ndarray | None = None) -> np.ndarray:
        """Sentence-BLEU of each member against the other members, as a fraction. float64 [G]
        (NaN outside ``members``; all NaN when fewer than 2 members)."""
        from sacrebleu.metrics import BLEU

        if members is None:
            members = np.ones(self.group_size, dtype=bool)
        out = np.full(self.group_size, np.nan)
        member_index = np.nonzero(members)[0]
        if member_index.size < 2:
            return out
        correct = np.zeros((self.group_size, MAX_NGRAM_ORDER), dtype=np.int64)
        total = np.zeros((self.group_size, MAX_NGRAM_ORDER), dtype=np.int64)
        for n, order in enumerate(self.orders):
            keep = members[order.owner]
            gram, owner = order.gram[keep], order.owner[keep]
            if gram.size == 0:
                continue
            stride = int(gram.max()) + 1
            pair, counts = np.unique(owner.astype(np.int64) * stride + gram, return_counts=True)
            pair_owner, pair_gram = pair // stride, pair % stride
            # For each gram: the highest count, who holds it, and the second-highest count.
            by_gram = np.lexsort((-counts, pair_gram))
            sorted_gram, sorted_count, sorted_owner = pair_gram[by_gram], counts[by_gram], pair_owner[by_gram]
            starts = np.nonzero(np.r_[True, sorted_gram[1:] != sorted_gram[:-1]])[0]
            ends = np.r_[starts[1:], sorted_gram.size]
            top1, top1_owner = sorted_count[starts], sorted_owner[starts]
            second = np.minimum(starts + 1, sorted_gram.size - 1)
            top2 = np.where(ends - starts > 1, sorted_count[second], 0)
            rank = np.searchsorted(sorted_gram[starts], pair_gram)
            best_other = np.where(top1_owner[rank] == pair_owner, top2[rank], top1[rank])
            clipped = np.minimum(counts, best_other)
            correct[:, n] = np.bincount(pair_owner, weights=clipped, minlength=self.group_size).astype(np.int64)
            total[:, n] = np.bincount(pair_owner, weights=counts, minlength=self.group_size).astype(np.int64)
        # Closest reference length among the other members, ties -> the shorter (sacrebleu's rule):
        # minimise (|len_i - len_j|, len_j) over j != i in one [g, g] pass.
        lengths = self.lengths[member_index]
        gap = np.abs(lengths[:, None] - lengths[None, :])
        np.fill_diagonal(gap, np.iinfo(np.int64).max // (2 * (int(lengths.max()) + 2)))
        closest = np.argmin(gap * (int(lengths.max()) + 1) + lengths[None, :], axis=1)
        ref_lengths = lengths[closest]
        for k, i in enumerate(member_index):
            score = BLEU.compute_bleu(correct[i].tolist(), total[i].tolist(), int(lengths[k]), int(ref_lengths[k]),
                                      smooth_method="exp", effective_order=True,
                                      max_ngram_order=MAX_NGRAM_ORDER)
            out[i] = min(score.score / 100.0, 1.0)  # exp(log(.)) can overshoot 1 by an ulp
        return out

    def self_bleu(self, members: np.ndarray | None = None) -> float:
        per_rollout = self.self_bleu_per_rollout(members)
        valid = per_rollout[~np.isnan(per_rollout)]
        return float(valid.mean()) if valid.size else float("nan")


def distinct_n(texts: Sequence[str], n: int) -> float:
    """distinct-n of a group of texts (see module docstring)."""
    return GroupNgrams(texts).distinct_n(n)


def self_bleu(texts: Sequence[str]) -> float:
    """Mean sentence-BLEU of each text against all the others, in [0, 1]."""
    return GroupNgrams(texts).self_bleu()
