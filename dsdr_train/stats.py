"""One step's statistics as frozen records, one per phase, reduced over ranks by ONE all-reduce.

Each phase returns its record of this rank's numbers (:class:`CollectStats` from the rollouts,
:class:`RewardStats` from the rewards, :class:`UpdateStats` from the PPO update);
:func:`reduce_stats` packs every number of every record into one float64 vector, exchanges the
vectors in one collective (:func:`dsdr_train.distributed.rank_rows`) and combines them per field:

* a :class:`Summary` (count, sum, squared deviations, min, max of per-rollout values) merges
  exactly into the summary of the concatenated values (Chan et al.'s pairwise update), so a mean,
  population std, min or max over all ranks is the one-process value on the whole batch;
* a ``summed`` field adds up over ranks (each rank holds its share of a whole-batch value);
* a ``maxed`` field takes the maximum; a ``local`` field keeps this rank's value (timings, lr).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from dsdr_train.distributed import Dist, rank_rows

R = TypeVar("R")


def summed(default: float = 0.0) -> Any:
    return dataclasses.field(default=default, metadata={"reduce": "sum"})


def maxed(default: float | None = None) -> Any:
    return dataclasses.field(default=default, metadata={"reduce": "max"})


def local(default: Any = 0.0) -> Any:
    return dataclasses.field(default=default, metadata={"reduce": "local"})


@dataclass(frozen=True)
class Summary:
    """Count, sum, sum of squared deviations from the mean, min and max of some values."""

    count: float = 0.0
    total: float = 0.0
    m2: float = 0.0
    minimum: float = math.inf
    maximum: float = -math.inf

    @classmethod
    def of(cls, values: Iterable[float]) -> "Summary":
        arr = np.asarray(list(values), dtype=np.float64)
        if not arr.size:
            return cls()
        return cls(float(arr.size), float(arr.sum()), float(((arr - arr.mean()) ** 2).sum()),
                   float(arr.min()), float(arr.max()))

    @classmethod
    def merge(cls, parts: Sequence["Summary"]) -> "Summary":
        parts = [p for p in parts if p.count > 0]
        if not parts:
            return cls()
        count = sum(p.count for p in parts)
        total = sum(p.total for p in parts)
        mean = total / count
        m2 = sum(p.m2 + p.count * (p.mean - mean) ** 2 for p in parts)
        return cls(count, total, m2, min(p.minimum for p in parts), max(p.maximum for p in parts))

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    @property
    def std(self) -> float:  # population std, as np.std
        return math.sqrt(max(self.m2, 0.0) / self.count) if self.count else 0.0

    @property
    def min(self) -> float:
        return self.minimum if self.count else 0.0

    @property
    def max(self) -> float:
        return self.maximum if self.count else 0.0


_SUMMARY_WIDTH = len(dataclasses.fields(Summary))


@dataclass(frozen=True)
class CollectStats:
    """Rollout collection (with DAPO's dynamic sampling, §2): group counts over everything generated."""

    num_gen_batches: int = local(1)
    groups: float = summed()
    all_correct_groups: float = summed()
    all_wrong_groups: float = summed()
    generate_s: float = local()
    grade_s: float = local()

    @classmethod
    def of_groups(cls, group_ids: Sequence[int], accuracy: Sequence[float], *, num_gen_batches: int,
                  generate_s: float, grade_s: float) -> "CollectStats":
        """Group statistics over everything generated this step (before any filtering)."""
        by_group: dict[int, list[float]] = {}
        for g, a in zip(group_ids, accuracy):
            by_group.setdefault(g, []).append(a)
        means = [float(np.mean(v)) for v in by_group.values()]
        return cls(num_gen_batches=num_gen_batches, groups=float(len(means)),
                   all_correct_groups=float(sum(x == 1.0 for x in means)),
                   all_wrong_groups=float(sum(x == 0.0 for x in means)), generate_s=generate_s, grade_s=grade_s)

    def metrics(self) -> dict[str, Any]:
        groups = max(self.groups, 1.0)  # no group generated: fractions 0
        return {"groups/all_correct_frac": self.all_correct_groups / groups,
                "groups/all_wrong_frac": self.all_wrong_groups / groups,
                "dapo/num_gen_batches": self.num_gen_batches, "time/generate_s": self.generate_s}


@dataclass(frozen=True)
class RewardStats:
    """Per-rollout rewards, advantages, lengths and diversity of the batch trained on."""

    reward: Summary = Summary()
    shaped: Summary = Summary()
    accuracy: Summary = Summary()
    advantages: Summary = Summary()
    lengths: Summary = Summary()
    length_stopped: Summary = Summary()  # 1 where generation hit max_response_length
    semantic: Summary | None = None  # D_emb (§3.1, Eq. 7); None: not computed this run
    formula: Summary | None = None  # D_eq (§3.1, Eq. 8)
    # Eq. 12's coupling weights, per group with >= 2 correct rollouts (fewer: w is 1 or 0, nothing to
    # see): the largest w_i, and H(w) / log|P_g| (1 = uniform over P_g, as w/o GD; 0 = one rollout
    # takes all). None: the objective has no local term.
    coupling_max: Summary | None = None
    coupling_entropy: Summary | None = None
    reward_s: float = local()

    @staticmethod
    def coupling(weights: Sequence[float], group_ids: Sequence[int]) -> tuple[Summary, Summary]:
        """(max w_i, H(w)/log|P_g|) over the groups with at least two non-zero weights."""
        by_group: dict[int, list[float]] = {}
        for g, w in zip(group_ids, weights):
            if w > 0:
                by_group.setdefault(int(g), []).append(float(w))
        groups = [np.asarray(v) / sum(v) for v in by_group.values() if len(v) >= 2]
        return (Summary.of(float(w.max()) for w in groups),
                Summary.of(float(-(w * np.log(w)).sum() / math.log(w.size)) for w in groups))

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "reward/mean": self.reward.mean, "reward/std": self.reward.std,
            "shaped_reward/mean": self.shaped.mean, "shaped_reward/std": self.shaped.std,
            "bonus/mean": self.shaped.mean - self.reward.mean, "acc/mean": self.accuracy.mean,
            "adv/mean": self.advantages.mean, "adv/std": self.advantages.std, "adv/min": self.advantages.min,
            "adv/max": self.advantages.max, "response_length/mean": self.lengths.mean,
            "response_length/max": self.lengths.max, "response_length/clip_ratio": self.length_stopped.mean}
        for name, summary in (("semantic", self.semantic), ("formula", self.formula)):
            out[f"diversity/{name}"] = None if summary is None else summary.mean
            out[f"similarity/{name}"] = None if summary is None else 1 - summary.mean
        if self.coupling_max is not None and self.coupling_entropy is not None:
            # no group with two correct rollouts this step: None, not a misleading 0
            out["coupling/max"] = self.coupling_max.mean if self.coupling_max.count else None
            out["coupling/entropy"] = self.coupling_entropy.mean if self.coupling_entropy.count else None
        return out


@dataclass(frozen=True)
class UpdateStats:
    """The PPO update: each loss term and token statistic is this rank's share of the mean over
    the step's mini-batches (so they add up over ranks)."""

    loss_pg: float = summed()
    loss_local: float = summed()
    loss_kl: float = summed()
    entropy: float = summed()
    clip_frac: float = summed()
    clip_frac_low: float = summed()
    clip_frac_high: float = summed()
    kl_approx: float = summed()
    ratio_dev_max: float | None = maxed()  # only with check_on_policy
    lr: float = local()
    update_s: float = local()

    def metrics(self) -> dict[str, Any]:
        out = {"loss/pg": self.loss_pg, "loss/local": self.loss_local, "loss/kl": self.loss_kl,
               "loss/total": self.loss_pg + self.loss_local + self.loss_kl, "entropy/mean": self.entropy,
               "clip/frac": self.clip_frac, "clip/frac_low": self.clip_frac_low, "clip/frac_high": self.clip_frac_high,
               "kl/approx": self.kl_approx, "lr": self.lr, "time/update_s": self.update_s}
        if self.ratio_dev_max is not None:
            out["rollout/ratio_dev_max"] = self.ratio_dev_max
        return out


def _pack(record: Any) -> list[float]:
    out: list[float] = []
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if f.metadata.get("reduce") == "local":
            continue
        if isinstance(value, Summary) or (value is None and "Summary" in str(f.type)):
            out.extend(dataclasses.astuple(value or Summary()))
        else:
            out.append(-math.inf if value is None else float(value))
    return out


def _unpack(record: R, rows: list[list[float]]) -> tuple[R, int]:
    """``record`` with every reduced field combined over the ranks' ``rows``; also the width used."""
    changes: dict[str, Any] = {}
    at = 0
    for f in dataclasses.fields(record):  # type: ignore[arg-type]
        value = getattr(record, f.name)
        kind = f.metadata.get("reduce")
        if kind == "local":
            continue
        if isinstance(value, Summary) or (value is None and "Summary" in str(f.type)):
            merged = Summary.merge([Summary(*row[at:at + _SUMMARY_WIDTH]) for row in rows])
            changes[f.name] = None if value is None else merged
            at += _SUMMARY_WIDTH
        else:
            column = [row[at] for row in rows]
            combined = sum(column) if kind == "sum" else max(column)
            changes[f.name] = None if value is None else type(value)(combined)
            at += 1
    return dataclasses.replace(record, **changes), at  # type: ignore[type-var]


def reduce_stats(dist: Dist, *records: R) -> list[R]:
    """The records with every field combined over all ranks, in ONE all-reduce (see the module
    docstring); every rank must pass records of the same shape (same None fields)."""
    packed = [_pack(r) for r in records]
    rows = rank_rows([v for p in packed for v in p], dist)
    out, offset = [], 0
    for record, values in zip(records, packed):
        reduced, width = _unpack(record, [row[offset:offset + len(values)] for row in rows])
        out.append(reduced)
        offset += width
    return out


def step_metrics(dist: Dist, *records: Any) -> dict[str, Any]:
    """The metrics of the step's records, reduced over ranks (one all-reduce)."""
    out: dict[str, Any] = {}
    for record in reduce_stats(dist, *records):
        out.update(record.metrics())
    return out


# metrics.jsonl's leading keys (the step and its phase times); every other key follows sorted.
_LEADING = ["step", "time/total_s", "time/generate_s", "time/reward_s", "time/update_s"]


def ordered_metrics(m: dict[str, Any]) -> dict[str, Any]:
    """``m`` in metrics.jsonl's key order (both engines write their records through it)."""
    def order(key: str) -> tuple[int, str]:
        return (_LEADING.index(key), key) if key in _LEADING else (len(_LEADING), key)

    return {k: m[k] for k in sorted(m, key=order)}
