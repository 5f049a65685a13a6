"""Graded rollouts -> rewards -> shaped advantages, the one code path of both engines (the
compact trainer and ``--engine trl``, which calls it on the whole gathered batch).

Per rollout i of a group (docs/ALGORITHMS.md):

    d_i       = (D_emb(o_i) + D_eq(o_i)) / 2        §3.1, Eq. 7-9   (scoring.group_diversity)
    Div(o_i)  = DARLING's partition diversity        §4, Eq. 15      (scoring.darling_diversity)
    r, r~, A, w = core_algos.shape_rewards(...)      Eq. 1, 6, 11, 12, 16, 17 by the objective's names
"""

from __future__ import annotations

import time

import numpy as np
import torch

from dsdr_train import core_algos as algos
from dsdr_train import scoring
from dsdr_train.config import TrainConfig
from dsdr_train.rollout import RolloutBatch
from dsdr_train.setup import DiversityModels
from dsdr_train.stats import RewardStats, Summary


def shape_batch(cfg: TrainConfig, batch: RolloutBatch, graded: list[dict], acc: np.ndarray,
                diversity: DiversityModels) -> tuple[algos.ShapedRewards, RewardStats]:
    """Per-rollout rewards, advantages and coupling weights of ``batch`` (graded: ``acc`` holds the
    0/1 verdicts) and the phase's stats of this process."""
    objective = cfg.objective
    t0 = time.perf_counter()
    lengths = torch.tensor([len(r) for r in batch.response_ids], dtype=torch.float32)
    dsdr_div = darling_div = None
    semantic = formula = None
    if diversity.encoder is not None and (objective.reward == "dsdr" or cfg.log_diversity):
        d_emb, d_eq, d = scoring.group_diversity(batch, graded, diversity.encoder, cfg.formula_rules,
                                                 cfg.solution_cut)  # Eq. 7, 8, 9 on each solution
        dsdr_div = torch.tensor(d, dtype=torch.float64)
        semantic, formula = Summary.of(d_emb.tolist()), Summary.of(d_eq.tolist())
    if objective.reward == "darling":  # Eq. 15
        darling_div = torch.tensor(scoring.darling_diversity(batch, graded, diversity.equivalence, cfg),
                                   dtype=torch.float64)
    # float64: in an all-correct DSDR group rewards differ by ~1e-4 (see core_algos.advantages).
    signals = algos.RolloutSignals(torch.tensor(acc, dtype=torch.float64), torch.tensor(batch.group_ids), lengths,
                                   cfg.max_response_length, diversity=dsdr_div, darling_div=darling_div)
    shaped = algos.shape_rewards(signals, objective)  # Eq. 6 + (Eq. 11 | Eq. 16) -> Eq. 1 | Eq. 17; Eq. 12
    coupling = (RewardStats.coupling(shaped.weights.tolist(), batch.group_ids) if objective.local_term
                else (None, None))
    stats = RewardStats(reward=Summary.of(shaped.reward.tolist()), shaped=Summary.of(shaped.shaped.tolist()),
                        accuracy=Summary.of(acc.tolist()), advantages=Summary.of(shaped.advantages.tolist()),
                        lengths=Summary.of(lengths.tolist()),
                        length_stopped=Summary.of([float(r == "length") for r in batch.finish_reasons]),
                        semantic=semantic, formula=formula, coupling_max=coupling[0], coupling_entropy=coupling[1],
                        reward_s=time.perf_counter() - t0)
    return shaped, stats


__all__ = ["shape_batch"]
