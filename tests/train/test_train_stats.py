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
