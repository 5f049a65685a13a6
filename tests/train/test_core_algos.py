"""Unit tests of dsdr_train.core_algos against values computed by hand (ALGORITHMS.md §1–§4).

Expected values are written out from the formulas (python floats / math), never by calling the
function under test a second time. float64 throughout unless a test is about dtype.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from dsdr_train import core_algos as C

F64 = torch.float64


def t64(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def ids(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


# ------------------------------------------------------------------------------------------
# §1 group advantage
# ------------------------------------------------------------------------------------------


def test_group_advantage_std_modes_by_hand():
    rewards = t64([1, 0, 0, 1])
    group = ids([0, 0, 0, 0])
    # mean 0.5; population std 0.5; bessel std sqrt(1/3)
    pop = C.compute_group_advantage(rewards, group, std_mode="population", eps=1e-6)
    expected = 0.5 / (0.5 + 1e-6)
    assert torch.allclose(pop, t64([expected, -expected, -expected, expected]), atol=1e-12)
    bes = C.compute_group_advantage(rewards, group, std_mode="bessel", eps=1e-6)
    expected_b = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert torch.allclose(bes, t64([expected_b, -expected_b, -expected_b, expected_b]), atol=1e-12)
    none = C.compute_group_advantage(rewards, group, std_mode="none")
    assert torch.allclose(none, t64([0.5, -0.5, -0.5, 0.5]), atol=1e-15)


def test_all_correct_group_advantage_comes_only_from_bonus_and_eps_matters():
    # §3.2: an all-correct group; rtilde = 1 + 0.001 * d. The advantage is the standardised bonus.
    d = [0.2, 0.4, 0.6, 0.8]
    rewards = t64([1, 1, 1, 1])
    shaped = C.dsdr_shaped_rewards(rewards, t64(d), lambda_d=0.001, sigma_d=1.0)
    assert torch.allclose(shaped, t64([1.0002, 1.0004, 1.0006, 1.0008]), atol=1e-15)
    deviations = [0.001 * (x - 0.5) for x in d]  # mean of d is 0.5
    pop_std = 0.001 * math.sqrt(sum((x - 0.5) ** 2 for x in d) / 4)  # = 2.2360679e-4
    for eps in (1e-6, 1e-3):
        adv = C.compute_group_advantage(shaped, ids([0] * 4), std_mode="population", eps=eps)
        expected = [dev / (pop_std + eps) for dev in deviations]
        assert torch.allclose(adv, t64(expected), rtol=1e-9, atol=1e-12)
    # magnitude: with eps = 1e-6 the tiny bonus produces O(1) advantages (1.3357 for the extremes)...
    adv_small_eps = C.compute_group_advantage(shaped, ids([0] * 4), eps=1e-6)
    assert abs(float(adv_small_eps[3]) - 0.3 / math.sqrt(0.05) * pop_std / (pop_std + 1e-6)) < 1e-9
    assert 1.33 < float(adv_small_eps[3]) < 1.34
    # ...while eps = 1e-3 shrinks them about 5.5x: eps and the std mode must be recorded
    adv_big_eps = C.compute_group_advantage(shaped, ids([0] * 4), eps=1e-3)
    assert 0.24 < float(adv_big_eps[3]) < 0.25
    # bessel changes the magnitude by sqrt(3/4)
    bes = C.compute_group_advantage(shaped, ids([0] * 4), std_mode="bessel", eps=0.0)
    assert abs(float(bes[3]) - 0.3 / math.sqrt(0.05 * 4 / 3)) < 1e-9


def test_all_correct_group_float32_input_keeps_bonus_resolution():
    d = torch.tensor([0.2, 0.4, 0.6, 0.8], dtype=torch.float32)
    shaped32 = C.dsdr_shaped_rewards(torch.ones(4, dtype=torch.float32), d)
    adv32 = C.compute_group_advantage(shaped32, ids([0] * 4))
    assert adv32.dtype == torch.float32
    expected = [0.001 * (x - 0.5) / (0.001 * math.sqrt(0.05) + 1e-6) for x in (0.2, 0.4, 0.6, 0.8)]
    # float32 quantises 1 + 1e-3 * d at ~1.2e-7, i.e. ~1e-3 of the bonus spread
    assert torch.allclose(adv32.double(), t64(expected), atol=5e-3)


def test_constant_group_and_single_rollout_group_get_zero_advantage():
    rewards = t64([1, 1, 1, 0, 0, 1])
    group = ids([0, 0, 0, 1, 1, 2])  # all-correct, all-wrong, G=1
    for mode in C.STD_MODES:
        adv = C.compute_group_advantage(rewards, group, std_mode=mode)
        assert torch.all(torch.isfinite(adv))
        assert torch.allclose(adv, torch.zeros(6, dtype=F64), atol=1e-9), mode
    # eps = 0 on a constant group: 0, not NaN
    adv = C.compute_group_advantage(rewards, group, std_mode="population", eps=0.0)
    assert torch.equal(adv, torch.zeros(6, dtype=F64))


def test_single_rollout_group_advantage_option():
    """singleton="reward" is verl's mean 0 / std 1 for a group of one; other groups are unchanged."""
    rewards, group = t64([1, 0, 1, 0.5]), ids([0, 0, 1, 2])
    for mode in C.STD_MODES:
        zero = C.compute_group_advantage(rewards, group, std_mode=mode)
        verl = C.compute_group_advantage(rewards, group, std_mode=mode, singleton="reward", eps=0.01)
        lone = [1.0, 0.5] if mode == "none" else [1.0 / 1.01, 0.5 / 1.01]
        assert torch.allclose(verl[2:], t64(lone), atol=1e-12), mode
        assert torch.equal(zero[2:], t64([0.0, 0.0]))
        assert torch.allclose(verl[:2], C.compute_group_advantage(rewards, group, std_mode=mode, eps=0.01)[:2])
    with pytest.raises(ValueError, match="singleton"):
        C.compute_group_advantage(rewards, group, singleton="one")


def test_interleaved_groups_equal_separate_computation():
    r_a, r_b = [1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]
    sep_a = C.compute_group_advantage(t64(r_a), ids([0] * 4))
    sep_b = C.compute_group_advantage(t64(r_b), ids([0] * 4))
    # interleave a0 b0 a1 b1 ... with non-contiguous arbitrary ids
    mixed_r = t64([x for pair in zip(r_a, r_b) for x in pair])
    mixed_g = ids([7, 3] * 4)
    mixed = C.compute_group_advantage(mixed_r, mixed_g)
    assert torch.allclose(mixed[0::2], sep_a, atol=1e-15)
    assert torch.allclose(mixed[1::2], sep_b, atol=1e-15)
    # the classic bug: one shared group id across two prompts gives a different (wrong) answer
    wrong = C.compute_group_advantage(mixed_r, ids([0] * 8))
    assert not torch.allclose(wrong[0::2], sep_a, atol=1e-3)


def test_group_advantage_validation():
    with pytest.raises(ValueError, match="integer"):
        C.compute_group_advantage(t64([1, 0]), t64([0, 0]))
    with pytest.raises(ValueError, match="shape mismatch"):
        C.compute_group_advantage(t64([1, 0]), ids([0, 0, 0]))
    with pytest.raises(ValueError, match="std_mode"):
        C.compute_group_advantage(t64([1, 0]), ids([0, 0]), std_mode="sample")
    with pytest.raises(ValueError, match="non-finite"):
        C.compute_group_advantage(t64([1, float("nan")]), ids([0, 0]))
    with pytest.raises(ValueError, match=r"shape \[B\]"):
        C.compute_group_advantage(t64([[1, 0]]), ids([0, 0]))
    # bool rewards are accepted (-> float32)
    adv = C.compute_group_advantage(torch.tensor([True, False]), ids([0, 0]))
    assert adv.dtype == torch.float32 and adv[0] > 0 > adv[1]


# ------------------------------------------------------------------------------------------
# §3.2 shaped reward, §3.3 coupling weights
# ------------------------------------------------------------------------------------------


def test_shaped_rewards_correct_only_and_clipped():
    rewards = t64([1, 1, 1, 0, 0])
    d = t64([0.5, 1.7, -0.3, 0.9, float("nan")])  # NaN on an incorrect rollout is ignored
    shaped = C.dsdr_shaped_rewards(rewards, d, lambda_d=0.01, sigma_d=0.8)
    assert torch.allclose(shaped, t64([1.005, 1.008, 1.0, 0.0, 0.0]), atol=1e-15)
    assert torch.equal(C.dsdr_shaped_rewards(rewards, d.nan_to_num(), lambda_d=0.0), rewards)
    with pytest.raises(ValueError, match="never a shaped reward"):
        C.dsdr_shaped_rewards(t64([1.0005, 0]), t64([0.1, 0.2]))
    with pytest.raises(ValueError, match="non-finite"):
        C.dsdr_shaped_rewards(t64([1, 0]), t64([float("nan"), 0.2]))
    with pytest.raises(ValueError, match="sigma_d"):
        C.dsdr_shaped_rewards(t64([1, 0]), t64([0.1, 0.2]), sigma_d=0.0)
    with pytest.raises(ValueError, match="shape mismatch"):
        C.dsdr_shaped_rewards(t64([1, 0]), t64([0.1, 0.2, 0.3]))


def test_coupling_weights_softmax_by_hand():
    rewards = t64([1, 0, 1, 1])
    d = t64([0.1, 0.9, 0.3, 1.4])  # 1.4 clipped to sigma_d = 1
    w = C.dsdr_coupling_weights(rewards, d, ids([0] * 4), tau=5.0)
    z = [math.exp(5 * 0.1), math.exp(5 * 0.3), math.exp(5 * 1.0)]
    total = sum(z)
    assert torch.allclose(w, t64([z[0] / total, 0.0, z[1] / total, z[2] / total]), atol=1e-15)
    assert abs(float(w.sum()) - 1.0) < 1e-15


def test_coupling_weights_no_correct_ties_uniform_and_mixing():
    d = t64([0.2, 0.7, 0.4, 0.4, 0.4, 0.9])
    rewards = t64([0, 0, 1, 1, 1, 0])
    group = ids([0, 0, 1, 1, 1, 1])
    w = C.dsdr_coupling_weights(rewards, d, group)
    # group 0 has no correct rollout: all zero (no local term); group 1: equal d -> uniform over P
    assert torch.allclose(w, t64([0, 0, 1 / 3, 1 / 3, 1 / 3, 0]), atol=1e-15)
    # uniform=True (w/o GD): 1/|P| whatever d is
    d2 = t64([0.2, 0.7, 0.1, 0.5, 0.9, 0.9])
    wu = C.dsdr_coupling_weights(rewards, d2, group, uniform=True)
    assert torch.allclose(wu, t64([0, 0, 1 / 3, 1 / 3, 1 / 3, 0]), atol=1e-15)
    # interleaving two groups == separate computation
    ra, da = [1.0, 1.0, 0.0], [0.1, 0.6, 0.3]
    rb, db = [0.0, 1.0, 1.0], [0.5, 0.2, 0.8]
    sep_a = C.dsdr_coupling_weights(t64(ra), t64(da), ids([0] * 3))
    sep_b = C.dsdr_coupling_weights(t64(rb), t64(db), ids([0] * 3))
    mixed = C.dsdr_coupling_weights(
        t64([x for p in zip(ra, rb) for x in p]), t64([x for p in zip(da, db) for x in p]), ids([5, 2] * 3)
    )
    assert torch.allclose(mixed[0::2], sep_a, atol=1e-15)
    assert torch.allclose(mixed[1::2], sep_b, atol=1e-15)


def test_coupling_weights_stable_for_huge_tau_and_validation():
    w = C.dsdr_coupling_weights(t64([1, 1, 1]), t64([0.1, 0.2, 0.3]), ids([0, 0, 0]), tau=1e5)
    assert torch.all(torch.isfinite(w))
    assert torch.allclose(w, t64([0, 0, 1]), atol=1e-12)
    w0 = C.dsdr_coupling_weights(t64([1, 1]), t64([0.1, 0.9]), ids([0, 0]), tau=0.0)
    assert torch.allclose(w0, t64([0.5, 0.5]), atol=1e-15)
    with pytest.raises(ValueError, match="tau"):
        C.dsdr_coupling_weights(t64([1, 1]), t64([0.1, 0.9]), ids([0, 0]), tau=-1.0)
    with pytest.raises(ValueError, match="0/1"):
        C.dsdr_coupling_weights(t64([2, 1]), t64([0.1, 0.9]), ids([0, 0]))


# ------------------------------------------------------------------------------------------
# §3.4 local entropy term
# ------------------------------------------------------------------------------------------


def test_local_term_by_hand_ragged_and_num_groups():
    log_probs = t64([[-1.0, -2.0, -3.0], [-0.5, -0.7, -9.0]])
    old = t64([[-1.0, -2.5, -3.0], [-0.5, -0.2, 0.0]])
    mask = t64([[1, 1, 1], [1, 1, 0]])
    weights = t64([0.25, 0.75])
    j = C.dsdr_local_entropy_term(log_probs, old, mask, weights)
    rho = [[1.0, math.exp(0.5), 1.0], [1.0, math.exp(-0.5)]]
    seq0 = (rho[0][0] * -1.0 + rho[0][1] * -2.0 + rho[0][2] * -3.0) / 3
    seq1 = (rho[1][0] * -0.5 + rho[1][1] * -0.7) / 2
    expected = -(0.25 * seq0 + 0.75 * seq1)
    assert abs(float(j) - expected) < 1e-12
    j2 = C.dsdr_local_entropy_term(log_probs, old, mask, weights, num_groups=2)
    assert abs(float(j2) - expected / 2) < 1e-12


def test_local_term_zero_without_correct_rollouts_and_padding_safe():
    lp = torch.tensor([[-1.0, -2.0, float("-inf")], [-0.3, float("nan"), 0.0]], dtype=F64, requires_grad=True)
    old = t64([[-1.1, -2.0, 0.0], [-0.3, 0.0, 0.0]])
    mask = t64([[1, 1, 0], [1, 0, 0]])
    # no correct rollout in the group: weights all 0 -> J_local = 0 and no gradient
    w = C.dsdr_coupling_weights(t64([0, 0]), t64([0.3, 0.6]), ids([0, 0]))
    assert torch.equal(w, torch.zeros(2, dtype=F64))
    j = C.dsdr_local_entropy_term(lp, old, mask, w)
    j.backward()
    assert float(j.detach()) == 0.0
    assert torch.equal(lp.grad, torch.zeros_like(lp))
    # with weight, garbage in the padding stays out of value and gradient
    lp.grad = None
    j = C.dsdr_local_entropy_term(lp, old, mask, t64([1.0, 0.0]))
    j.backward()
    assert torch.isfinite(j) and torch.all(torch.isfinite(lp.grad))
    assert lp.grad[0, 2] == 0 and lp.grad[1, 1] == 0


def test_local_term_validation():
    lp = torch.zeros(2, 3, dtype=F64)
    mask = torch.ones(2, 3, dtype=F64)
    with pytest.raises(ValueError, match="shape mismatch"):
        C.dsdr_local_entropy_term(lp, torch.zeros(2, 4, dtype=F64), mask, t64([1, 0]))
    with pytest.raises(ValueError, match="rows"):
        C.dsdr_local_entropy_term(lp, lp, mask, t64([1, 0, 0]))
    with pytest.raises(ValueError, match=">= 0"):
        C.dsdr_local_entropy_term(lp, lp, mask, t64([1.5, -0.5]))
    with pytest.raises(ValueError, match="0/1"):
        C.dsdr_local_entropy_term(lp, lp, mask * 0.5, t64([1, 0]))


def _enumerate_policy(theta0, theta1, length):
    """All sequences of a tiny autoregressive categorical policy, with their logits and log-probs.

    pi(o1) = softmax(theta0); pi(o2 | o1) = softmax(theta1[o1]). Returns (seqs, logits[B,T,V],
    log_probs[B,T]) for every sequence of exactly `length` tokens.
    """
    vocab = theta0.shape[0]
    seqs = list(itertools.product(range(vocab), repeat=length))
    logits = torch.stack(
        [torch.stack([theta0] + [theta1[s[t - 1]] for t in range(1, length)]) for s in seqs]
    )  # [B, T, V]
    tokens = torch.tensor(seqs, dtype=torch.long)
    log_probs = torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return seqs, logits, log_probs


@pytest.mark.parametrize("length", [1, 2])
@pytest.mark.parametrize("perturb", [0.0, 0.3])
def test_local_term_gradient_is_entropy_gradient_exactly(length, perturb):
    """§3.4, exact enumeration. With o ~ pi_old and rho not detached,
    E_{o~pi_old}[rho_t log pi_theta(o_t|h_t)] = sum_a pi_theta(a|h_t) log pi_theta(a|h_t) = -H(h_t),
    so E[J_local] (weights = pi_old(o), which is exactly the expectation) equals the mean per-token
    entropy of pi_theta on the prefixes visited by pi_old, and so do their gradients. Checked at
    theta = theta_old (perturb 0) and at theta != theta_old (the IS identity holds for any theta).
    """
    gen = torch.Generator().manual_seed(1234)
    vocab = 3
    theta0_old = torch.randn(vocab, generator=gen, dtype=F64)
    theta1_old = torch.randn(vocab, vocab, generator=gen, dtype=F64)
    theta0 = (theta0_old + perturb * torch.randn(vocab, generator=gen, dtype=F64)).requires_grad_(True)
    theta1 = (theta1_old + perturb * torch.randn(vocab, vocab, generator=gen, dtype=F64)).requires_grad_(True)

    _, _, old_log_probs = _enumerate_policy(theta0_old, theta1_old, length)
    _, logits, log_probs = _enumerate_policy(theta0, theta1, length)
    prob_old = old_log_probs.sum(-1).exp()  # pi_old(o): weights that turn the sum into E_{o~pi_old}
    assert abs(float(prob_old.sum()) - 1.0) < 1e-12
    mask = torch.ones_like(log_probs)

    params = (theta0,) if length == 1 else (theta0, theta1)  # theta1 is unused for one token
    expected_j = C.dsdr_local_entropy_term(log_probs, old_log_probs, mask, prob_old)
    grad_j = torch.autograd.grad(expected_j, params, retain_graph=True)

    entropy = C.token_entropy_from_logits(logits)  # [B, T] = H(pi_theta(.|h_t)) at each visited prefix
    mean_entropy = (prob_old * entropy.mean(-1)).sum()
    grad_h = torch.autograd.grad(mean_entropy, params)

    assert abs(expected_j.item() - mean_entropy.item()) < 1e-12
    for g_j, g_h in zip(grad_j, grad_h):
        assert torch.allclose(g_j, g_h, atol=1e-12, rtol=0)
    assert float(grad_h[0].abs().max()) > 1e-3  # the check is not vacuous

    # the reason rho must carry gradient: detached, the expected gradient at theta_old vanishes
    if perturb == 0.0:
        detached = -(prob_old * log_probs.mean(-1)).sum()  # rho.detach() == 1 at theta_old
        grad_detached = torch.autograd.grad(detached, params)
        for g in grad_detached:
            assert torch.allclose(g, torch.zeros_like(g), atol=1e-14)


def test_local_term_eos_dependent_length_is_biased():
    """Documented limitation: when T_i depends on the scored token (EOS ends the sequence), the
    1/T_i weighting breaks the identity above: at the first step E[J_local] contains
    sum_a pi(a) (-log pi(a)) / T(a) instead of E[1/T] * H, so neither the value nor the gradient
    is exactly the (length-weighted) mean entropy. Token 0 is EOS: (0) has T = 1, (a, b) for
    a != 0 has T = 2. The bias is a property of §3.4's 1/T_i, not of the implementation."""
    gen = torch.Generator().manual_seed(7)
    vocab = 3
    theta0 = torch.randn(vocab, generator=gen, dtype=F64, requires_grad=True)
    theta1 = torch.randn(vocab, vocab, generator=gen, dtype=F64, requires_grad=True)
    _, logits2, lp2 = _enumerate_policy(theta0, theta1, 2)
    keep = torch.tensor([s[0] != 0 for s in itertools.product(range(vocab), repeat=2)])
    log_probs = torch.cat([torch.stack([lp2[0, 0], lp2.new_zeros(())]).unsqueeze(0), lp2[keep]])
    logits = torch.cat([logits2[:1], logits2[keep]])
    mask = torch.ones_like(log_probs)
    mask[0, 1] = 0
    prob_old = (log_probs * mask).sum(-1).exp().detach()
    assert abs(float(prob_old.sum()) - 1.0) < 1e-12
    j = C.dsdr_local_entropy_term(log_probs, log_probs.detach(), mask, prob_old)
    entropy = C.token_entropy_from_logits(logits) * mask
    mean_entropy = (prob_old * entropy.sum(-1) / mask.sum(-1)).sum()
    grad_j = torch.autograd.grad(j, theta0, retain_graph=True)[0]
    grad_h = torch.autograd.grad(mean_entropy, theta0)[0]
    assert abs(j.item() - mean_entropy.item()) > 1e-3
    assert float((grad_j - grad_h).abs().max()) > 1e-3
    # the first-step term by hand: E[J_local] = sum_a pi(a) (-log pi(a)) / T(a) + second-step entropies
    p0 = torch.softmax(theta0.detach(), -1)
    h1 = C.token_entropy_from_logits(theta1.detach().unsqueeze(0))[0]  # H(pi(.|a)) for each a
    by_hand = -p0[0] * p0[0].log() + sum(p0[a] * (-p0[a].log() + h1[a]) / 2 for a in (1, 2))
    assert abs(j.item() - by_hand.item()) < 1e-12


# ------------------------------------------------------------------------------------------
# §1 loss aggregation, clipped surrogate, KL
# ------------------------------------------------------------------------------------------


RAGGED_LOSS = t64([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 99.0, 99.0], [7.0, 99.0, 99.0, 99.0]])
RAGGED_MASK = t64([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 3 + 4 + 5 + 6 + 7) / 7),
        ("seq-mean-token-mean", (10 / 4 + 11 / 2 + 7 / 1) / 3),
        ("seq-mean-token-sum", (10 + 11 + 7) / 3),
        ("seq-mean-token-sum-norm", (10 + 11 + 7) / (3 * 4)),  # Eq. 4d: |B| * C, C = mask.shape[-1] by default
    ],
)
def test_agg_loss_modes_on_ragged_mask(mode, expected):
    assert abs(float(C.agg_loss(RAGGED_LOSS, RAGGED_MASK, mode)) - expected) < 1e-12
    # a padding row (no valid token) changes nothing: it is not a sequence
    padded_loss = torch.cat([RAGGED_LOSS, t64([[float("inf")] * 4])])
    padded_mask = torch.cat([RAGGED_MASK, torch.zeros(1, 4, dtype=F64)])
    assert abs(float(C.agg_loss(padded_loss, padded_mask, mode)) - expected) < 1e-12


def test_agg_loss_norm_constant_and_validation():
    assert abs(float(C.agg_loss(RAGGED_LOSS, RAGGED_MASK, "seq-mean-token-sum-norm", norm_constant=8)) - 28 / (3 * 8)
               ) < 1e-12
    with pytest.raises(ValueError, match="norm_constant"):
        C.agg_loss(RAGGED_LOSS, RAGGED_MASK, "token-mean", norm_constant=8)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        C.agg_loss(RAGGED_LOSS, RAGGED_MASK, "seq-sum")
    with pytest.raises(ValueError, match="shape mismatch"):
        C.agg_loss(RAGGED_LOSS, RAGGED_MASK[:, :3], "token-mean")
    assert float(C.agg_loss(RAGGED_LOSS, torch.zeros_like(RAGGED_MASK), "token-mean")) == 0.0


@pytest.mark.parametrize("mode", C.LOSS_AGG_MODES)
def test_agg_loss_pieces_with_whole_batch_divisors_sum_to_one_pass(mode):
    """Gradient accumulation / data parallelism: unequal pieces (different rows, lengths and padded
    widths), each reduced with the whole batch's divisors, add up to the one-pass loss."""
    gen = torch.Generator().manual_seed(0)
    lengths = [1, 7, 2, 8, 3, 3, 5, 1, 0]  # the last row is empty (a padding row)
    pieces = [[0, 1, 2], [3], [4, 5, 6, 7, 8]]
    width = max(lengths)
    loss = torch.randn(len(lengths), width, generator=gen, dtype=F64)
    mask = t64([[1.0] * n + [0.0] * (width - n) for n in lengths])
    divisors = C.agg_divisors(mode, num_tokens=sum(lengths), num_sequences=sum(n > 0 for n in lengths),
                              norm_constant=16)
    one_pass = C.agg_loss(loss, mask, mode, **divisors)
    by_hand = {  # from the formulas, over the whole batch
        "token-mean": sum(loss[i, :n].sum().item() for i, n in enumerate(lengths)) / 30,
        "seq-mean-token-mean": sum(loss[i, :n].mean().item() for i, n in enumerate(lengths) if n) / 8,
        "seq-mean-token-sum": sum(loss[i, :n].sum().item() for i, n in enumerate(lengths)) / 8,
        "seq-mean-token-sum-norm": sum(loss[i, :n].sum().item() for i, n in enumerate(lengths)) / (8 * 16),
    }[mode]
    assert abs(one_pass.item() - by_hand) < 1e-12
    accumulated = 0.0
    for rows in pieces:
        piece_width = max(max(lengths[i] for i in rows), 1)  # each piece padded to its own width
        accumulated += C.agg_loss(loss[rows, :piece_width], mask[rows, :piece_width], mode, **divisors).item()
    assert abs(accumulated - by_hand) < 1e-12


def test_agg_divisors_and_their_validation():
    assert C.agg_divisors("token-mean", num_tokens=30, num_sequences=8) == {"num_tokens": 30.0}
    assert C.agg_divisors("seq-mean-token-mean", num_tokens=30, num_sequences=8) == {"num_sequences": 8.0}
    assert C.agg_divisors("seq-mean-token-sum", num_tokens=0, num_sequences=0) == {"num_sequences": 1.0}
    assert C.agg_divisors("seq-mean-token-sum-norm", num_tokens=30, num_sequences=8, norm_constant=4096) == {
        "num_sequences": 8.0, "norm_constant": 4096.0}
    with pytest.raises(ValueError, match="norm_constant"):
        C.agg_divisors("seq-mean-token-sum-norm", num_tokens=30, num_sequences=8)
    with pytest.raises(ValueError, match="num_tokens only applies"):
        C.agg_loss(RAGGED_LOSS, RAGGED_MASK, "seq-mean-token-mean", num_tokens=7)
    with pytest.raises(ValueError, match="num_sequences only applies"):
        C.agg_loss(RAGGED_LOSS, RAGGED_MASK, "token-mean", num_sequences=3)
    with pytest.raises(ValueError, match="num_tokens must be > 0"):
        C.agg_loss(RAGGED_LOSS, RAGGED_MASK, "token-mean", num_tokens=0)


def test_policy_loss_asymmetric_clipping():
    # one row, four tokens: (ratio, A) = (1.5, +2) (0.5, -1) (1.5, -1) (0.5, +1)
    old = torch.zeros(1, 4, dtype=F64)
    log_probs = torch.log(t64([[1.5, 0.5, 1.5, 0.5]])).requires_grad_(True)
    adv = t64([[2.0, -1.0, -1.0, 1.0]])
    mask = torch.ones(1, 4, dtype=F64)
    loss, stats = C.compute_policy_loss(
        log_probs, old, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.28, loss_agg_mode="token-mean"
    )
    # objective per token: min(3.0, 2.56) = 2.56 (clipped high at 1 + 0.28); min(-0.5, -0.8) = -0.8
    # (clipped low at 1 - 0.2); min(-1.5, -1.28) = -1.5 (not clipped); min(0.5, 0.8) = 0.5 (not clipped)
    expected = -(2.56 - 0.8 - 1.5 + 0.5) / 4
    assert abs(loss.item() - expected) < 1e-12
    assert stats["clip/frac"] == 0.5 and stats["clip/frac_low"] == 0.25 and stats["clip/frac_high"] == 0.25
    assert stats["ratio/max"] == pytest.approx(1.5) and stats["ratio/min"] == pytest.approx(0.5)
    assert stats["ratio/mean"] == pytest.approx(1.0)
    expected_k3 = sum(r - 1 - math.log(r) for r in (1.5, 0.5, 1.5, 0.5)) / 4
    assert stats["kl/approx"] == pytest.approx(expected_k3, abs=1e-12)
    loss.backward()
    # d loss / d logp = -A * ratio / 4 on unclipped tokens, 0 on clipped ones
    assert torch.allclose(log_probs.grad, t64([[0.0, 0.0, 1.5 / 4, -0.5 / 4]]), atol=1e-12)


def test_policy_loss_symmetric_grpo_and_broadcast_advantages():
    old = torch.zeros(2, 3, dtype=F64)
    log_probs = torch.log(t64([[1.25, 1.1, 0.9], [0.7, 1.0, 1.3]]))
    mask = t64([[1, 1, 1], [1, 1, 0]])
    adv_row = t64([2.0, -1.0])
    loss_b, stats_b = C.compute_policy_loss(log_probs, old, adv_row, mask, loss_agg_mode="seq-mean-token-mean")
    loss_bt, _ = C.compute_policy_loss(
        log_probs, old, adv_row.unsqueeze(-1).expand(2, 3), mask, loss_agg_mode="seq-mean-token-mean"
    )
    # row 0 (A=2): min(2.5, 2.4)=2.4 (1.25 clipped at 1.2), 2.2, 1.8; row 1 (A=-1): min(-0.7,-0.8)=-0.8, -1.0
    expected = -((2.4 + 2.2 + 1.8) / 3 + (-0.8 - 1.0) / 2) / 2
    assert abs(float(loss_b) - expected) < 1e-12 and abs(float(loss_bt) - expected) < 1e-12
    assert stats_b["clip/frac"] == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match="advantages"):
        C.compute_policy_loss(log_probs, old, t64([1.0, 2.0, 3.0]), mask)
    with pytest.raises(ValueError, match="clip_ratio"):
        C.compute_policy_loss(log_probs, old, adv_row, mask, clip_ratio_low=1.0)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        C.compute_policy_loss(log_probs, old, adv_row, mask, loss_agg_mode="mean")


def test_kl_k3_nonnegative_zero_at_equality_and_clamped():
    gen = torch.Generator().manual_seed(0)
    lp = torch.randn(4, 5, generator=gen, dtype=F64)
    ref = torch.randn(4, 5, generator=gen, dtype=F64)
    kl = C.kl_penalty_k3(lp, ref)
    assert kl.shape == (4, 5) and bool((kl >= 0).all())
    manual = torch.exp(ref - lp) - (ref - lp) - 1
    assert torch.allclose(kl, manual.clamp(max=10), atol=1e-12)
    assert torch.equal(C.kl_penalty_k3(lp, lp), torch.zeros_like(lp))
    assert float(C.kl_penalty_k3(t64([[0.0]]), t64([[30.0]]))) == 10.0
    with pytest.raises(ValueError, match="shape mismatch"):
        C.kl_penalty_k3(lp, ref[:, :4])


# ------------------------------------------------------------------------------------------
# §4 DARLING, §2 DAPO
# ------------------------------------------------------------------------------------------


def test_darling_rewards_floor_and_advantage():
    r = t64([1, 1, 1, 0])
    div = t64([0.0, 0.05, 0.5, 1.0])
    assert torch.allclose(C.darling_rewards(r, div), t64([0.1, 0.1, 0.5, 0.0]), atol=1e-15)
    assert torch.allclose(C.darling_rewards(r, div, floor=0.0), t64([0.0, 0.05, 0.5, 0.0]), atol=1e-15)
    signals = C.RolloutSignals(r, ids([0] * 4), torch.zeros(4), 1, darling_div=div)
    adv = C.shape_rewards(signals, C.objective_config("darling")).advantages
    assert torch.allclose(adv, t64([0.1 - 0.175, 0.1 - 0.175, 0.5 - 0.175, -0.175]), atol=1e-12)
    with pytest.raises(ValueError, match="floor"):
        C.darling_rewards(r, div, floor=1.5)


def test_dapo_overlong_penalty_piecewise():
    lengths = torch.tensor([0, 75, 80, 90, 100, 120])
    pen = C.dapo_overlong_penalty(lengths, max_response_length=100)  # buffer 25
    assert pen.dtype == F64
    assert torch.allclose(pen, t64([0, 0, -0.2, -0.6, -1.0, -1.0]), atol=1e-12)
    pen = C.dapo_overlong_penalty(lengths, max_response_length=100, buffer=10, factor=0.5)
    assert torch.allclose(pen, t64([0, 0, 0, 0, -0.5, -0.5]), atol=1e-12)
    pen = C.dapo_overlong_penalty(torch.tensor([95]), max_response_length=100, buffer=10, factor=0.5)
    assert abs(float(pen[0]) + 0.25) < 1e-12
    with pytest.raises(ValueError, match="buffer"):
        C.dapo_overlong_penalty(lengths, max_response_length=100, buffer=0)
    with pytest.raises(ValueError, match="buffer"):
        C.dapo_overlong_penalty(lengths, max_response_length=100, buffer=101)
    with pytest.raises(ValueError, match=">= 0"):
        C.dapo_overlong_penalty(torch.tensor([-1]), max_response_length=100)


def test_dapo_keep_groups_filters_on_accuracy():
    acc = t64([1, 1, 0, 0, 1, 0, 0, 1])
    group = ids([0, 0, 1, 1, 2, 2, 3, 4])  # all-correct, all-wrong, mixed, G=1 wrong, G=1 right
    keep = C.dapo_keep_groups(acc, group)
    assert keep.tolist() == [False, False, False, False, True, True, False, False]
    # interleaved groups give the same decisions
    keep2 = C.dapo_keep_groups(t64([1, 0, 1, 1]), ids([3, 9, 9, 3]))
    assert keep2.tolist() == [False, True, True, False]
    # shaped rewards are refused: the bonus must not rescue all-correct groups
    shaped = C.dsdr_shaped_rewards(t64([1, 1]), t64([0.2, 0.9]))
    with pytest.raises(ValueError, match="never a shaped reward"):
        C.dapo_keep_groups(shaped, ids([0, 0]))


# ------------------------------------------------------------------------------------------
# entropy metric, group ids, registries, defaults
# ------------------------------------------------------------------------------------------


def test_token_entropy_from_logits():
    uniform = torch.zeros(1, 2, 5, dtype=F64)
    assert torch.allclose(C.token_entropy_from_logits(uniform), torch.full((1, 2), math.log(5), dtype=F64))
    logits = t64([[[2.0, 0.0, -1.0]]])
    for temperature in (1.0, 0.5):
        p = torch.softmax(logits / temperature, -1)
        expected = float(-(p * p.log()).sum())
        assert abs(float(C.token_entropy_from_logits(logits, temperature)) - expected) < 1e-12
    huge = t64([[[1e4, 0.0, -1e4]]])
    assert torch.isfinite(C.token_entropy_from_logits(huge)).all()
    masked = t64([[[0.0, 0.0, float("-inf")]]])
    assert abs(float(C.token_entropy_from_logits(masked)) - math.log(2)) < 1e-12
    with pytest.raises(ValueError, match="temperature"):
        C.token_entropy_from_logits(logits, 0.0)
    with pytest.raises(ValueError, match=r"\[B, T, V\]"):
        C.token_entropy_from_logits(logits[0])


def test_group_ids_from_prompt_index():
    got = C.group_ids_from_prompt_index(["p7", "p2", "p7", "p2", "p9"])
    assert got.dtype == torch.long and got.tolist() == [0, 1, 0, 1, 2]
    got = C.group_ids_from_prompt_index(torch.tensor([5, 5, 3, 3]), expected_group_size=2)
    assert got.tolist() == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="'b' has 1 rollouts"):
        C.group_ids_from_prompt_index(["a", "a", "b"], expected_group_size=2)
    with pytest.raises(ValueError, match="hashable"):
        C.group_ids_from_prompt_index([["a"], ["b"]])


def test_registries():
    assert C.get_adv_estimator_fn("grpo") is C.compute_group_advantage
    assert C.get_reward_shaping_fn("verifier") is C.verifier_reward
    assert C.get_reward_shaping_fn("dsdr") is C.dsdr_reward
    assert C.get_reward_shaping_fn("darling") is C.darling_reward
    assert C.get_policy_loss_fn("vanilla") is C.compute_policy_loss
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        C.get_adv_estimator_fn("ppo")
    with pytest.raises(ValueError, match="already registered"):
        C.register_adv_estimator("grpo")(lambda *a, **k: None)
    with pytest.raises(ValueError, match="already registered"):
        C.register_reward_shaping("dsdr")(lambda *a, **k: None)
    # the dsdr objective = §1 advantage of the §3.2 shaped reward
    signals = C.RolloutSignals(t64([1, 1, 0]), ids([0, 0, 0]), torch.zeros(3), 1, diversity=t64([0.2, 0.8, 0.5]))
    adv = C.shape_rewards(signals, C.objective_config("dsdr")).advantages
    shaped = [1.0002, 1.0008, 0.0]
    mean = sum(shaped) / 3
    std = math.sqrt(sum((x - mean) ** 2 for x in shaped) / 3)
    assert torch.allclose(adv, t64([(x - mean) / (std + 1e-6) for x in shaped]), atol=1e-12)


def test_objective_names_are_checked_against_the_registries():
    C.check_registered(C.objective_config("grpo"))
    for key in ("reward", "adv_estimator", "policy_loss"):
        with pytest.raises(ValueError, match=key):
            C.check_registered(C.objective_config("grpo", **{key: "nope"}))


def test_shape_rewards_dispatches_by_name(monkeypatch):
    """The trainer's one dispatch site calls whatever the config names: a shaping registered
    under a new name is used as is (plus the overlong term), with the named estimator."""
    seen = []

    def half(signals, config):
        seen.append(config.reward)
        return signals.accuracy * 0.5

    monkeypatch.setitem(C.REWARD_SHAPING_REGISTRY, "half", half)
    signals = C.RolloutSignals(t64([1, 0, 1, 1]), ids([0, 0, 1, 1]), torch.zeros(4), 8)
    out = C.shape_rewards(signals, C.objective_config("grpo", reward="half"))
    assert seen == ["half"]
    assert torch.equal(out.shaped, t64([0.5, 0.0, 0.5, 0.5])) and torch.equal(out.reward, t64([1, 0, 1, 1]))
    assert torch.allclose(out.advantages, t64([1, -1, 0, 0]), atol=1e-5)


@pytest.mark.parametrize("algo", ["dapo", "dsdr", "darling"])
def test_overlong_penalty_is_its_own_term_on_every_shaping(algo):
    """DAPO's overlong term (Eq. 6) is added to the verifier reward and to whatever shaping the
    run uses: shaped = shaping(r) + penalty, reward = r + penalty."""
    r = t64([1, 0, 1, 0])
    lengths = torch.tensor([2, 10, 16, 14])
    signals = C.RolloutSignals(r, ids([0, 0, 1, 1]), lengths, 16, diversity=t64([0.3, 0.1, 0.9, 0.2]),
                               darling_div=t64([0.5, 1.0, 0.2, 0.7]))
    config = C.objective_config(algo, overlong_shaping=True, overlong_buffer=8)
    out = C.shape_rewards(signals, config)
    penalty = C.dapo_overlong_penalty(lengths, max_response_length=16, buffer=8)
    assert torch.equal(out.reward, r + penalty)
    assert torch.equal(out.shaped, C.get_reward_shaping_fn(config.reward)(signals, config) + penalty)
    off = C.shape_rewards(signals, C.objective_config(algo, overlong_shaping=False))
    assert torch.equal(off.reward, r)


def test_algo_defaults_match_algorithms_md():
    assert set(C.ALGO_DEFAULTS) == {"grpo", "dapo", "dsdr", "dsdr_wo_gd", "dsdr_wo_gc", "darling"}
    cfg = {name: C.objective_config(name) for name in C.ALGO_DEFAULTS}  # each validates
    assert (cfg["grpo"].clip_ratio_low, cfg["grpo"].clip_ratio_high) == (0.2, 0.2)
    assert cfg["grpo"].loss_agg_mode == "seq-mean-token-mean"
    assert (cfg["dapo"].clip_ratio_high, cfg["dapo"].loss_agg_mode) == (0.28, "token-mean")
    assert cfg["dapo"].dynamic_sampling and cfg["dapo"].overlong_shaping and cfg["dapo"].max_num_gen_batches == 10
    d = cfg["dsdr"]
    assert (d.lambda_d, d.lambda_l, d.tau, d.sigma_d, d.clip_ratio_high) == (0.001, 0.001, 5.0, 1.0, 0.28)
    assert d.local_term and not d.uniform_coupling and d.reward == "dsdr"
    assert cfg["dsdr_wo_gd"].lambda_d == 0.0 and cfg["dsdr_wo_gd"].uniform_coupling and cfg["dsdr_wo_gd"].local_term
    assert cfg["dsdr_wo_gc"].lambda_d == 0.001 and not cfg["dsdr_wo_gc"].local_term
    assert cfg["darling"].std_mode == "none" and cfg["darling"].darling_floor == 0.1
    assert (cfg["darling"].clip_ratio_high, cfg["darling"].loss_agg_mode) == (0.2, "token-mean")
    for c in cfg.values():
        assert c.std_mode in C.STD_MODES and c.eps == 1e-6 and not c.use_kl and c.kl_coef == 0.0
    assert C.objective_config("dsdr", tau=2.0).tau == 2.0
    with pytest.raises(ValueError, match="unknown objective setting"):
        C.objective_config("dsdr", taus=2.0)
    with pytest.raises(ValueError, match="unknown algo"):
        C.objective_config("ppo")
    with pytest.raises(ValueError, match="lambda_l"):
        C.objective_config("dsdr_wo_gc", lambda_l=0.001)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        C.objective_config("grpo", loss_agg_mode="sum")
    with pytest.raises(ValueError, match="use_kl"):
        C.objective_config("grpo", use_kl=True)
    assert C.objective_config("grpo", use_kl=True, kl_coef=0.001).to_dict()["kl_coef"] == 0.001
