"""The whole generation batch on every process, and its mini-batches.

TRL spreads one prompt's ``num_generations`` completions over processes (its RepeatSampler keeps
them contiguous in process-major order, and a group may straddle two processes). DSDR's bonus
and coupling weights are functions of a WHOLE group (§3.1-§3.3), so every process gathers the
batch's texts, verdicts and lengths (:func:`gather_batch`), scores the whole batch exactly as
the compact trainer does, and keeps its own rows.

The mini-batch layout (:func:`mini_batch_chunks`) reproduces the compact trainer's
(:func:`dsdr_train.update.ppo_update`): the process's groups are shuffled as whole groups with
the same generator, and every loss term of a micro-batch is divided by the divisors of its
whole mini-batch (all micro-batches on all processes), so accumulation and data parallelism
change nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dsdr_train import core_algos as algos
from dsdr_train.rollout import RolloutBatch
from dsdr_train.update import mini_batch_divisors, shuffle_generator


@dataclass(frozen=True)
class LocalRollouts:
    """This process's rollouts of the generation batch, as graded by the reward function."""

    batch: RolloutBatch
    graded: list[dict]
    grade_s: float


def gather_batch(local: LocalRollouts, group_size: int, gather_object: Any) -> tuple[RolloutBatch, list[dict]]:
    """The whole batch in TRL's process-major order, group ids by contiguity (rollout ``k`` is in
    group ``k // G``, the order TRL's own advantage uses); a group mixing problems is an error."""
    rows = gather_object([(local.batch.prompt_ids[i], local.batch.response_ids[i], local.batch.texts[i],
                           local.batch.finish_reasons[i], local.batch.problem_idx[i], local.graded[i])
                          for i in range(len(local.batch))])
    whole = RolloutBatch()
    graded = []
    for k, (prompt, response, text, finish, problem, grade) in enumerate(rows):
        whole.prompt_ids.append(list(prompt))
        whole.response_ids.append(list(response))
        whole.texts.append(text)
        whole.finish_reasons.append(finish)
        whole.problem_idx.append(int(problem))
        whole.group_ids.append(k // group_size)
        graded.append(grade)
    for g in range(len(rows) // group_size):
        if len(set(whole.problem_idx[g * group_size:(g + 1) * group_size])) != 1:
            raise RuntimeError(f"TRL batch layout: rollouts {g * group_size}..{(g + 1) * group_size - 1} are not one "
                               "prompt's group; the RepeatSampler order was changed")
    return whole, graded


def signal_mask(accuracy: torch.Tensor, group_ids: torch.Tensor, dynamic_sampling: bool) -> torch.Tensor:
    """``[B]`` 1 for rollouts that train. DAPO's dynamic sampling (§2) drops the groups whose
    accuracy does not vary; TRL cannot drop and resample groups, so their rows are masked out of
    the loss and out of every divisor (the exact loss of the compact trainer on the kept groups)."""
    if not dynamic_sampling:
        return torch.ones_like(accuracy, dtype=torch.float32)
    return algos.dapo_keep_groups(accuracy, group_ids).to(torch.float32)


def group_order(group_ids: list[int], seed: int, step: int) -> list[int]:
    """This process's rows, whole (local parts of) groups shuffled with the compact trainer's
    generator (``update.ppo_update``: seed * 100003 + step), rows of a group in order."""
    groups: dict[int, list[int]] = {}
    for i, g in enumerate(group_ids):
        groups.setdefault(g, []).append(i)
    members = list(groups.values())
    perm = torch.randperm(len(members), generator=shuffle_generator(seed, step)).tolist()
    return [i for gi in perm for i in members[gi]]


def take_rows(batch: dict[str, Any], rows: list[int]) -> dict[str, Any]:
    """``batch`` restricted to ``rows`` (per-row tensors and lists); everything else copied."""
    n = len(batch["advantages"])
    index = torch.tensor(rows, dtype=torch.long)
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == n:
            out[key] = value[index.to(value.device)]
        elif isinstance(value, list) and len(value) == n:
            out[key] = [value[i] for i in rows]
        else:
            out[key] = value
    return out


def mini_batch_chunks(batch: dict[str, Any], order: list[int], *, micro: int, grad_accum: int, objective: Any,
                      norm_constant: float | None, gather_object: Any) -> list[dict[str, Any]]:
    """The process's micro-batches in ``order``, each with ``dsdr_divisors``: the ``agg_loss``
    keyword of its whole mini-batch, J_local's divisor (``local_norm``) and the token count,
    all over every process (one ``gather_object`` for all mini-batches)."""
    chunks = [take_rows(batch, order[i:i + micro]) for i in range(0, len(order), micro)]
    per_mini = [chunks[m:m + grad_accum] for m in range(0, len(chunks), grad_accum)]
    local = []
    for parts in per_mini:
        tokens = sequences = 0.0
        groups: set[int] = set()
        correct: set[int] = set()
        for c in parts:
            lengths = (c["completion_mask"] * c["dsdr_keep"][:, None]).sum(dim=1)
            tokens += float(lengths.sum())
            sequences += float((lengths > 0).sum())
            for g, keep, w in zip(c["dsdr_group_ids"], c["dsdr_keep"].tolist(), c["dsdr_weights"].tolist()):
                if keep:
                    groups.add(g)
                    if w > 0:
                        correct.add(g)
        local.append((tokens, sequences, sorted(groups), sorted(correct)))
    everyone = gather_object([local])  # [world][mini-batch]
    for m, parts in enumerate(per_mini):
        tokens = sum(p[m][0] for p in everyone)
        sequences = sum(p[m][1] for p in everyone)
        prompts = float(len(set().union(*(p[m][2] for p in everyone))))
        correct_prompts = float(len(set().union(*(p[m][3] for p in everyone))))
        divisors, local_divisor, token_divisor = mini_batch_divisors(
            objective, tokens=tokens, sequences=sequences, prompts=prompts, correct_prompts=correct_prompts,
            norm_constant=norm_constant)
        for c in parts:
            c["dsdr_divisors"] = {"agg": divisors, "local": local_divisor, "tokens": token_divisor}
    return chunks
