"""One step's rollouts: draw prompts (whole groups per rank), generate G rollouts each, grade them,
and with DAPO's dynamic sampling (docs/ALGORITHMS.md §2) keep only the groups whose verifier
accuracy varies, drawing more generation batches until the quota is full or max_num_gen_batches.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from dsdr_eval.errors import DsdrError
from dsdr_eval.tasks import Problem
from dsdr_train import core_algos as algos
from dsdr_train import scoring
from dsdr_train.config import TrainConfig
from dsdr_train.data import PromptSampler
from dsdr_train.distributed import Dist, all_reduce_scalar
from dsdr_train.rollout import RolloutBatch
from dsdr_train.stats import CollectStats

# generate(prompt_ids, group_ids, problem_idx, *, n, temperature, top_p, max_tokens) -> RolloutBatch
Generate = Callable[..., RolloutBatch]


class DapoExhausted(DsdrError):
    """DAPO's dynamic sampling did not fill the batch within max_num_gen_batches (dapo_exhausted=error)."""


@dataclass
class PromptPool:
    """The training problems that fit max_prompt_length, their token ids, and the seeded sampler."""

    problems: list[Problem]
    prompt_ids: list[list[int]]
    sampler: PromptSampler


@dataclass(frozen=True)
class Collected:
    """The rollouts trained on, their grading rows and 0/1 verdicts ``[B]``, and the phase's stats."""

    batch: RolloutBatch
    graded: list[dict]
    accuracy: np.ndarray
    stats: CollectStats


def draw_prompts(pool: PromptPool, cfg: TrainConfig, dist: Dist) -> tuple[list[list[int]], list[int], list[int]]:
    """Every rank draws the same global prompt list and takes its own slice of whole groups.

    The group id is the problem's global draw position (sampler cursor), unique over all steps,
    ranks and DAPO generation batches, so rollouts of different prompts never share an id."""
    local_prompts = cfg.prompts_per_step // dist.world
    start = pool.sampler.cursor
    indices = pool.sampler.next_indices(cfg.prompts_per_step)
    offsets = range(dist.rank * local_prompts, (dist.rank + 1) * local_prompts)
    return [pool.prompt_ids[indices[o]] for o in offsets], [start + o for o in offsets], [indices[o] for o in offsets]


def collect_rollouts(generate: Generate, pool: PromptPool, cfg: TrainConfig, dist: Dist, step: int) -> Collected:
    """Generate and grade until the step's batch is full (see the module docstring)."""
    objective = cfg.objective
    local_prompts = cfg.prompts_per_step // dist.world
    kept, kept_graded, n_gen = RolloutBatch(), [], 0
    all_acc: list[float] = []
    all_gids: list[int] = []
    t_gen = t_grade = 0.0
    limit = objective.max_num_gen_batches if objective.dynamic_sampling else 1
    last: tuple[RolloutBatch, list[dict]] | None = None
    while True:
        n_gen += 1
        t0 = time.perf_counter()
        prompts, gids, pis = draw_prompts(pool, cfg, dist)
        batch = generate(prompts, gids, pis, n=cfg.group_size, temperature=cfg.temperature, top_p=cfg.top_p,
                         max_tokens=cfg.max_response_length)
        t1 = time.perf_counter()
        graded = scoring.grade(batch, pool.problems, cfg) if len(batch) else []
        t_gen, t_grade = t_gen + t1 - t0, t_grade + time.perf_counter() - t1
        acc = [float(r["correct"]) for r in graded]
        all_acc.extend(acc), all_gids.extend(batch.group_ids)
        last = (batch, graded)
        rows = _rows_with_signal(acc, batch) if objective.dynamic_sampling else list(range(len(batch)))
        kept.extend(batch.select(rows)), kept_graded.extend(graded[i] for i in rows)
        have = len(set(kept.group_ids))
        # All ranks take the same decision, so every rank runs the same number of generate calls.
        need_more = all_reduce_scalar(float(have < local_prompts), dist, "max") > 0
        if not need_more or n_gen >= limit:
            break
    if objective.dynamic_sampling:
        if need_more and objective.dapo_exhausted == "error":
            kept_total = int(all_reduce_scalar(float(have), dist, "sum"))
            raise DapoExhausted(f"config key 'max_num_gen_batches': DAPO dynamic sampling kept {kept_total} of "
                                f"{cfg.prompts_per_step} prompts with varying accuracy after {n_gen} generation batches "
                                f"at step {step + 1} (dapo_exhausted=error; dapo_exhausted=train updates on what was kept)")
        kept, kept_graded = _trim_to_equal_groups(kept, kept_graded, last, local_prompts, dist)
    stats = CollectStats.of_groups(all_gids, all_acc, num_gen_batches=n_gen, generate_s=t_gen, grade_s=t_grade)
    return Collected(kept, kept_graded, np.array([float(r["correct"]) for r in kept_graded]), stats)


def _rows_with_signal(acc: list[float], batch: RolloutBatch) -> list[int]:
    if not len(batch):
        return []
    keep = algos.dapo_keep_groups(torch.tensor(acc), torch.tensor(batch.group_ids))
    return [i for i, k in enumerate(keep.tolist()) if k]


def _trim_to_equal_groups(kept: RolloutBatch, kept_graded: list[dict], last: tuple[RolloutBatch, list[dict]] | None,
                          local_prompts: int, dist: Dist) -> tuple[RolloutBatch, list[dict]]:
    """Whole groups, the same number on every rank (DDP needs equal update counts)."""
    target = int(all_reduce_scalar(float(min(len(set(kept.group_ids)), local_prompts)), dist, "min"))
    if target == 0 and last is not None:
        # Nothing with signal after max_num_gen_batches: train on the last batch as is (its
        # accuracy advantages are all zero) rather than skip the optimizer step.
        kept, kept_graded = last
        target = len(set(kept.group_ids))
    keep_set = set(list(dict.fromkeys(kept.group_ids))[:target])
    rows = [i for i, g in enumerate(kept.group_ids) if g in keep_set]
    return kept.select(rows), [kept_graded[i] for i in rows]

