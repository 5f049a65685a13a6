"""The trainer's per-rollout signals from dsdr_eval: verifier verdicts (one reused grading pool)
and the diversity scores of DSDR (§3.1) and DARLING (§4), each computed within its group."""

from __future__ import annotations

import atexit
from typing import Any

import numpy as np

from dsdr_eval.tasks import Problem
from dsdr_train.config import TrainConfig
from dsdr_train.rollout import RolloutBatch

# One GradingPool per (timeout, workers) for the whole run, not fresh math-verify workers at every
# grade call: 0.33-0.66 s/step with fresh workers vs 0.006-0.013 s/step reused (30 steps of 2 problems
# x 8 ten-token SmolLM2 completions from reports/mini_experiment, shared 2-core machine; see
# `python benchmarks/stress_grading.py --step-timing`). The workers also import dsdr_eval.grading
# once, instead of re-importing whatever is on disk at every step.
_GRADING_POOLS: dict[tuple[float, int], Any] = {}


def grading_pool(cfg: TrainConfig) -> Any:
    from dsdr_eval.grading import GradingPool, default_workers

    # A step grades at most prompts_per_step problems, so more workers than that would sit idle.
    workers = cfg.grade_workers or max(1, min(default_workers(), cfg.prompts_per_step))
    key = (cfg.grading_timeout_s, workers)
    if key not in _GRADING_POOLS:
        if not _GRADING_POOLS:
            atexit.register(close_grading_pools)
        _GRADING_POOLS[key] = GradingPool(grading_timeout_s=cfg.grading_timeout_s, workers=workers)
    return _GRADING_POOLS[key]


def close_grading_pools() -> None:
    while _GRADING_POOLS:
        _GRADING_POOLS.popitem()[1].close()


def grade(batch: RolloutBatch, problems: list[Problem], cfg: TrainConfig) -> list[dict]:
    from dsdr_eval.grading import grade_samples

    rows = [{"problem_id": f"g{g}", "gold": problems[pi].answer, "answer_meta": problems[pi].answer_meta,
             "completion": text}
            for g, pi, text in zip(batch.group_ids, batch.problem_idx, batch.texts)]
    return grade_samples(rows, progress=False, pool=grading_pool(cfg))


def groups_of(group_ids: list[int]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, g in enumerate(group_ids):
        out.setdefault(g, []).append(i)
    return out


def solutions(batch: RolloutBatch, graded: list[dict], cut: str) -> list[Any]:
    """Each rollout's solution (``dsdr_eval.grading.solution.cut_at_answer``): its text up to the
    end of its graded final answer (``answer_end`` of its graded row) under ``cut`` = "answer-end", so what a
    policy writes after its answer -- a runaway, a dropped ``$`` that opens a span into it -- earns no bonus."""
    from dsdr_eval.grading.solution import check_cut, cut_at_answer

    check_cut(cut)
    return [cut_at_answer(text, row.get("answer_end") if row.get("extracted") is not None else None, cut)
            for text, row in zip(batch.texts, graded)]


def group_diversity(batch: RolloutBatch, graded: list[dict], encoder: Any, formula_rules: str = "extended",
                    cut: str = "answer-end") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-rollout (d_emb, d_eq, d) of docs/ALGORITHMS.md §3.1 (Eq. 7, 8, 9), each within its group
    (one encode call), on each rollout's solution (``solutions``)."""
    from dsdr_eval.diversity_metrics import dsdr_diversity_batch

    cut_texts = solutions(batch, graded, cut)
    div = dsdr_diversity_batch([s.text for s in cut_texts], batch.group_ids, encoder=encoder,
                               formula_rules=formula_rules, ends_at_answer=[s.ends_at_answer for s in cut_texts])
    return div.d_emb, div.d_eq, div.d


def darling_diversity(batch: RolloutBatch, graded: list[dict], equivalence: Any, cfg: Any) -> np.ndarray:
    """DARLING Div per rollout (docs/ALGORITHMS.md §4, Eq. 15) from dsdr_eval's pluggable partition (embedding threshold,
    answer+formula identity, pair classifier or judge), computed within each group on each rollout's solution
    (``solutions``). ``cfg``: a TrainConfig or the verl plugin's settings."""
    from dsdr_eval.diversity_metrics import darling_div, darling_partition, formula_set

    cut_texts = solutions(batch, graded, cfg.solution_cut)
    out = np.zeros(len(batch))
    for rows in groups_of(batch.group_ids).values():
        texts = [cut_texts[i].text for i in rows]
        sets = [formula_set(cut_texts[i].text, rules=cfg.formula_rules, ends_at_answer=cut_texts[i].ends_at_answer)
                for i in rows]
        classes = darling_partition(texts, equivalence, answer_classes=[graded[i].get("answer_class") for i in rows],
                                    formula_sets=sets)
        out[rows] = darling_div(classes, floor=cfg.objective.darling_floor)
    return out
