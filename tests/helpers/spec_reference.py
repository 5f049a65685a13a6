"""An independent reference of the training objective, written from docs/ALGORITHMS.md Eq. 1-17 in
plain torch. It imports nothing from dsdr_train (no core_algos, no update code): the engine tests
(tests/train/test_reference_objective.py, tests_verl/test_reference_objective.py) compare each engine's
loss and gradients with it, so a defect shared by every engine's call of core_algos shows up.

Per-rollout inputs are plain lists: ``groups`` (prompt id), ``acc`` (verifier 0/1), ``lengths``
(T_i), ``diversity`` (d_i, Eq. 9: the encoder is not re-derived here) and ``darling_div`` (Eq. 15).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

ALGOS = ("grpo", "dapo", "dsdr", "dsdr_wo_gd", "dsdr_wo_gc", "darling")
MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


@dataclass(frozen=True)
class Spec:
    """One algorithm's settings as the spec states them (§1-§4); the weights are the test's."""

    algo: str
    clip_low: float
    clip_high: float
    std: bool  # Eq. 1 with the population std; False: Eq. 17 (r - mean)
    bonus: float  # lambda_d (Eq. 11); 0 = none
    uniform: bool  # w/o GD: uniform coupling over P (§3.6)
    lambda_l: float  # Eq. 14; 0 = no local term
    overlong: bool  # Eq. 6 added to the reward (DAPO)
    filter_groups: bool  # §2 dynamic sampling: drop groups whose accuracy does not vary
    darling: bool  # Eq. 16
    eps: float = 1e-6
    tau: float = 5.0
    sigma_d: float = 1.0


def spec(algo: str, *, lambda_d: float = 0.3, lambda_l: float = 0.5) -> Spec:
    """The spec's settings of ``algo`` with the test's (large, visible) lambda_d and lambda_l."""
    return {
        "grpo": Spec(algo, 0.2, 0.2, True, 0.0, False, 0.0, False, False, False),
        "dapo": Spec(algo, 0.2, 0.28, True, 0.0, False, 0.0, True, True, False),
        "dsdr": Spec(algo, 0.2, 0.28, True, lambda_d, False, lambda_l, False, False, False),
        "dsdr_wo_gd": Spec(algo, 0.2, 0.28, True, 0.0, True, lambda_l, False, False, False),
        "dsdr_wo_gc": Spec(algo, 0.2, 0.28, True, lambda_d, False, 0.0, False, False, False),
        "darling": Spec(algo, 0.2, 0.2, False, 0.0, False, 0.0, False, False, True),
    }[algo]


def _members(groups: list) -> dict:
    out: dict = {}
    for i, g in enumerate(groups):
        out.setdefault(g, []).append(i)
    return out


def kept_groups(s: Spec, groups: list, acc: list[float]) -> set:
    """§2: with dynamic sampling only the groups whose verifier accuracy varies train."""
    members = _members(groups)
    if not s.filter_groups:
        return set(members)
    return {g for g, rows in members.items() if len({acc[i] for i in rows}) > 1}


def rewards_advantages_weights(s: Spec, groups: list, acc: list[float], lengths: list[int], max_len: int,
                               diversity: list[float], darling_div: list[float]
                               ) -> tuple[list[float], list[float], list[float]]:
    """Per rollout: the reward the advantage normalises, A_i (Eq. 1 / 17) and w_i (Eq. 12)."""
    n = len(groups)
    rewards = []
    for i in range(n):
        r = float(acc[i])
        dbar = min(max(diversity[i], 0.0), s.sigma_d)  # Eq. 10
        if s.bonus and acc[i] == 1:  # Eq. 11: correct rollouts only
            r += s.bonus * dbar
        if s.darling:  # Eq. 16
            r = float(acc[i]) * darling_div[i]
        if s.overlong:  # Eq. 6, buffer L_max / 4, kappa 1
            buf = max_len // 4
            r += min(0.0, -(lengths[i] - (max_len - buf)) / buf * 1.0)
        rewards.append(r)
    advantages, weights = [0.0] * n, [0.0] * n
    for rows in _members(groups).values():
        values = [rewards[i] for i in rows]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))  # population (÷ G)
        for i in rows:
            advantages[i] = (rewards[i] - mean) / (std + s.eps) if s.std else rewards[i] - mean
            if len(rows) == 1:
                advantages[i] = 0.0
        correct = [i for i in rows if acc[i] == 1]
        if correct:  # Eq. 12 over P; none: no local term for the group
            scores = [math.exp(s.tau * min(max(diversity[i], 0.0), s.sigma_d)) for i in correct]
            for i, e in zip(correct, scores):
                weights[i] = 1.0 / len(correct) if s.uniform else e / sum(scores)
    return rewards, advantages, weights


def token_log_probs(model: torch.nn.Module, prompt: list[int], response: list[int], temperature: float = 1.0
                    ) -> torch.Tensor:
    """log pi(o_t | q, o_<t) of each response token: one plain forward of prompt + response."""
    ids = torch.tensor([prompt + response])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:len(prompt) - 1 + len(response)].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(-1, torch.tensor(response)[:, None])[:, 0]


def mini_batch_loss(s: Spec, mode: str, logp: list[torch.Tensor], old: list[torch.Tensor], advantages: list[float],
                    weights: list[float], acc: list[float], n_prompts: int, max_len: int) -> torch.Tensor:
    """Eq. 14's loss of one mini-batch (rows given in any order): -J_GRPO (Eq. 2-4) - lambda_l J_local."""
    per_seq_sum, per_seq_len, all_tokens = [], [], []
    for lp, o, a in zip(logp, old, advantages):
        ratio = torch.exp(torch.clamp(lp - o.detach(), -20.0, 20.0))  # Eq. 2
        ell = torch.minimum(ratio * a, torch.clamp(ratio, 1 - s.clip_low, 1 + s.clip_high) * a)  # Eq. 3
        per_seq_sum.append(ell.sum())
        per_seq_len.append(len(lp))
        all_tokens.append(ell)
    rows = [k for k, n in enumerate(per_seq_len) if n > 0]
    n_seq = len(rows)
    if mode == "token-mean":  # Eq. 4a
        j_grpo = torch.cat(all_tokens).sum() / sum(per_seq_len)
    elif mode == "seq-mean-token-mean":  # Eq. 4b
        j_grpo = sum(per_seq_sum[k] / per_seq_len[k] for k in rows) / n_seq
    elif mode == "seq-mean-token-sum":  # Eq. 4c
        j_grpo = sum(per_seq_sum[k] for k in rows) / n_seq
    else:  # Eq. 4d: |B| * L_max
        j_grpo = sum(per_seq_sum[k] for k in rows) / (n_seq * max_len)
    loss = -j_grpo
    if s.lambda_l:
        j_local = 0.0
        for lp, o, w, r in zip(logp, old, weights, acc):
            if r == 1 and w > 0 and len(lp):
                ratio = torch.exp(torch.clamp(lp - o.detach(), -20.0, 20.0))  # NOT detached (§3.4)
                j_local = j_local - w * (ratio * lp).sum() / len(lp)  # Eq. 13
        loss = loss - s.lambda_l * j_local / n_prompts  # mean over the mini-batch's prompts (§3.4)
    return loss
