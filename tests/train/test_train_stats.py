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


def test_cpu_kv_cache_is_sized_to_the_steps_rollouts():
    """Keys and values of every layer for max_seqs sequences of whole 256-token blocks, x2 headroom,
    recomputed here from a Llama config (grouped-query attention, head_dim implied by hidden / heads)."""
    from dsdr_train.rollout import cpu_kv_cache_bytes

    smollm2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}
    per_token = 2 * 30 * 3 * (576 // 9) * 4  # K and V, 30 layers, 3 kv heads of 64, fp32
    got = cpu_kv_cache_bytes(smollm2, max_model_len=304, max_seqs=16, dtype_bytes=4)
    assert got == 2 * 16 * 512 * per_token  # 304 tokens take two 256-token blocks
    assert got < 2**30  # the ablation study's step: well under 1 GiB (vs 0.4 x RAM unsized)
    nested = {"text_config": {**smollm2, "head_dim": 128}}
    assert cpu_kv_cache_bytes(nested, max_model_len=256, max_seqs=64, dtype_bytes=2) == 2 * 64 * 256 * (2 * 30 * 3 * 128 * 2)
    assert cpu_kv_cache_bytes(smollm2, max_model_len=16, max_seqs=1, dtype_bytes=4) == 256 * 2**20  # the floor
