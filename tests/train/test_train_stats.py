"""The trainer's per-phase stats records and their one-all-reduce combination (no model, fast)."""

from __future__ import annotations

import pytest


def test_stats_records_merge_exactly_over_ranks():
    """The per-rank summaries of the one all-reduce combine into the one-process mean, population
    std, min and max of the concatenated values; summed fields add up, local ones stay."""
    import numpy as np

    from dsdr_train.stats import Summary, UpdateStats, _pack, _unpack

    parts = [[1.0, 1.0002, 0.0], [1.0008, 0.5], []]
    merged = Summary.merge([Summary.of(p) for p in parts])
    every = [v for p in parts for v in p]
    assert merged.count == 5 and merged.mean == pytest.approx(np.mean(every), abs=1e-15)
    assert merged.std == pytest.approx(np.std(every), rel=1e-12) and (merged.min, merged.max) == (0.0, 1.0008)
    ranks = [UpdateStats(loss_pg=0.25, ratio_dev_max=0.1, lr=1e-6), UpdateStats(loss_pg=0.5, ratio_dev_max=0.3, lr=2.0)]
    reduced, width = _unpack(ranks[0], [_pack(r) for r in ranks])
    assert width == len(_pack(ranks[0]))
    assert (reduced.loss_pg, reduced.ratio_dev_max, reduced.lr) == (0.75, 0.3, 1e-6)


def test_coupling_weight_stats_match_a_reference_from_eq12():
    """coupling/max and coupling/entropy: Eq. 12's weights (softmax of tau * clip(d, 0, 1) over the
    correct rollouts of a group) recomputed here in plain Python, summarised over the groups with at
    least two correct rollouts; split over two ranks the one all-reduce gives the same numbers."""
    import math as m

    import torch

    from dsdr_train.core_algos import dsdr_coupling_weights
    from dsdr_train.stats import RewardStats, _pack, _unpack

    tau = 5.0
    correct = [1, 1, 1, 0, 1, 0, 0, 0, 1, 1, 0, 0]
    div = [0.9, 0.1, 0.4, 0.7, 0.3, 0.2, 0.5, 0.6, 1.7, -0.2, 0.3, 0.3]  # clip active on 1.7 and -0.2
    groups = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]  # 3 correct / 1 correct (excluded) / 2 correct
    w = dsdr_coupling_weights(torch.tensor(correct, dtype=torch.float64), torch.tensor(div, dtype=torch.float64),
                              torch.tensor(groups), tau=tau)
    ref_max, ref_ent = [], []
    for g in (0, 2):
        z = [m.exp(tau * min(max(d, 0.0), 1.0)) for d, c, gg in zip(div, correct, groups) if gg == g and c]
        p = [v / sum(z) for v in z]
        ref_max.append(max(p))
        ref_ent.append(-sum(q * m.log(q) for q in p) / m.log(len(p)))
    mx, ent = RewardStats.coupling(w.tolist(), groups)
    assert mx.count == ent.count == 2
    assert mx.mean == pytest.approx(sum(ref_max) / 2, rel=1e-12) and ent.mean == pytest.approx(sum(ref_ent) / 2, rel=1e-12)
    metrics = RewardStats(coupling_max=mx, coupling_entropy=ent).metrics()
    assert metrics["coupling/max"] == pytest.approx(sum(ref_max) / 2, rel=1e-12)
    # uniform coupling (w/o GD): entropy ratio exactly 1, max = 1/|P|
    umx, uent = RewardStats.coupling([1 / 3] * 3 + [0.0], [0, 0, 0, 0])
    assert umx.mean == pytest.approx(1 / 3) and uent.mean == pytest.approx(1.0)
    # no group with two correct rollouts: null, not 0
    none = RewardStats(coupling_max=RewardStats.coupling([1.0, 0.0], [0, 0])[0],
                       coupling_entropy=RewardStats.coupling([1.0, 0.0], [0, 0])[1]).metrics()
    assert none["coupling/max"] is None and none["coupling/entropy"] is None
    assert "coupling/max" not in RewardStats().metrics()  # objectives without the local term
    # two ranks, one group each: the merged record has the one-process means
    ranks = [RewardStats(coupling_max=RewardStats.coupling(w[:4].tolist(), groups[:4])[0],
                         coupling_entropy=RewardStats.coupling(w[:4].tolist(), groups[:4])[1]),
             RewardStats(coupling_max=RewardStats.coupling(w[4:].tolist(), groups[4:])[0],
                         coupling_entropy=RewardStats.coupling(w[4:].tolist(), groups[4:])[1])]
    merged, _ = _unpack(ranks[0], [_pack(r) for r in ranks])
    assert merged.metrics()["coupling/entropy"] == pytest.approx(sum(ref_ent) / 2, rel=1e-12)

