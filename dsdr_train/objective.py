"""The objective settings of a run: one frozen :class:`ObjectiveConfig` and each algorithm's defaults.

Torch-free (``dsdr-train --help`` and config parsing stay fast); the functions these settings
drive live in :mod:`dsdr_train.core_algos`, which re-exports everything here. Section numbers
refer to ``docs/ALGORITHMS.md``. ``TrainConfig.objective`` holds one ``ObjectiveConfig``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

STD_MODES = ("population", "bessel", "none")
SINGLETON_ADVANTAGES = ("zero", "reward")  # the advantage of a group of one (see compute_group_advantage)
LOCAL_NORMS = ("prompts", "correct_prompts", "none")  # J_local's batch divisor (see dsdr_local_entropy_term)
DAPO_EXHAUSTED = ("train", "error")  # dynamic sampling out of max_num_gen_batches (see ObjectiveConfig)
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
REWARD_KINDS = ("verifier", "dsdr", "darling")  # core_algos.REWARD_SHAPING_REGISTRY

# Per-algorithm objective defaults (§1-§4)
_COMMON: dict[str, Any] = {
    "std_mode": "population",  # §1: DSDR states the population std; used for every std baseline
    "eps": 1e-6,  # §1
    "clip_ratio_low": 0.2,
    "clip_ratio_high": 0.2,
    "log_ratio_clamp": 20.0,  # §1
    "loss_agg_mode": "token-mean",
    "adv_estimator": "grpo",  # core_algos.ADV_ESTIMATOR_REGISTRY
    "policy_loss": "vanilla",  # core_algos.POLICY_LOSS_REGISTRY
    "reward": "verifier",  # verifier | dsdr | darling
    "lambda_d": 0.0,
    "sigma_d": 1.0,  # §3.2: not given in the paper
    "tau": 5.0,  # §3.3
    "uniform_coupling": False,
    "local_term": False,
    "lambda_l": 0.0,
    "use_kl": False,  # §1: off by default (beta = 0)
    "kl_coef": 0.0,
    "kl_estimator": "low_var_kl",
    "dynamic_sampling": False,
    "max_num_gen_batches": 10,  # §2
    "dapo_exhausted": "train",  # §2 "give up": train on what was kept (verl: "error")
    "singleton_advantage": "zero",  # §1 silent on G = 1 (verl: "reward")
    "local_norm": "prompts",  # §3.4 per prompt; batch mean over the mini-batch's prompts
    "overlong_shaping": False,
    "overlong_buffer": None,  # None -> max_response_length // 4 (§2)
    "overlong_factor": 1.0,  # §2
    "darling_floor": 0.1,  # §4
}

ALGO_DEFAULTS: dict[str, dict[str, Any]] = {
    # §1 GRPO; seq-mean-token-mean = the DSDR paper's GRPO Eq. 3
    "grpo": {**_COMMON, "loss_agg_mode": "seq-mean-token-mean"},
    # §2 DAPO: clip-higher, token-mean, dynamic sampling, overlong shaping, no KL
    "dapo": {
        **_COMMON,
        "clip_ratio_high": 0.28,
        "loss_agg_mode": "token-mean",
        "dynamic_sampling": True,
        "overlong_shaping": True,
    },
    # §3 DSDR: J = J_GRPO(theta; rtilde) + lambda_l * J_local, clip-higher
    "dsdr": {
        **_COMMON,
        "clip_ratio_high": 0.28,
        "loss_agg_mode": "seq-mean-token-mean",
        "reward": "dsdr",
        "lambda_d": 0.001,
        "local_term": True,
        "lambda_l": 0.001,
    },
    # §3.6 w/o GD: no bonus, uniform coupling over P, local term kept
    "dsdr_wo_gd": {
        **_COMMON,
        "clip_ratio_high": 0.28,
        "loss_agg_mode": "seq-mean-token-mean",
        "reward": "dsdr",
        "lambda_d": 0.0,
        "uniform_coupling": True,
        "local_term": True,
        "lambda_l": 0.001,
    },
    # §3.6 w/o GC: bonus kept, no local term
    "dsdr_wo_gc": {
        **_COMMON,
        "clip_ratio_high": 0.28,
        "loss_agg_mode": "seq-mean-token-mean",
        "reward": "dsdr",
        "lambda_d": 0.001,
        "local_term": False,
        "lambda_l": 0.0,
    },
    # §4 DARLING: r * Div, advantage without std, token-mean, clip (0.2, 0.2), no KL/entropy bonus
    "darling": {**_COMMON, "std_mode": "none", "reward": "darling", "loss_agg_mode": "token-mean"},
}

ALGO_NOTES: dict[str, dict[str, str]] = {
    "grpo": {
        "std_mode": "paper silent for the GRPO baseline; population as DSDR states, for comparability "
        "(verl's GRPO uses torch.std = bessel)",
        "loss_agg_mode": "the DSDR paper's GRPO objective (Eq. 3) averages tokens per sequence, then sequences",
    },
    "dapo": {
        "std_mode": "DAPO does not say population vs bessel; population for comparability",
        "overlong_buffer": "DAPO's recipe value depends on L_max; docs/ALGORITHMS.md §2, Eq. 6: default L_max // 4",
    },
    "dsdr": {
        "loss_agg_mode": "paper silent at code level; J_GRPO in the objective is Eq. 3 (seq-mean-token-mean), "
        "and J_local is length-normalised per sequence the same way. token-mean (verl's default, "
        "DAPO lineage) is the alternative if the authors kept verl's default",
        "sigma_d": "not given in the paper; 1.0 = the upper bound of d, i.e. no clipping",
        "dynamic_sampling": "not stated for DSDR; off: it would drop the all-correct groups, exactly the "
        "ones where the bonus is the only signal",
        "overlong_shaping": "not stated for DSDR; off",
        "lambda_l": "J_local is per prompt (§3.4); the trainer divides the batch sum by the number of "
        "prompts (num_groups) so lambda_l is per prompt like J_GRPO",
    },
    "dsdr_wo_gd": {"uniform_coupling": "§3.6: coupling weights uniform over the correct rollouts"},
    "dsdr_wo_gc": {"local_term": "§3.6: no local term (lambda_l = 0)"},
    "darling": {
        "eps": "unused: no std normalisation",
        "darling_floor": "§4: Div floored at 0.1",
    },
}


# Choices the papers leave open that apply to every algorithm (recorded with every run).
COMMON_NOTES: dict[str, str] = {
    "singleton_advantage": "a group of one rollout: the papers are silent; zero = no signal without a "
    "comparison (default), reward = verl's mean 0 / std 1, i.e. A = r / (1 + eps)",
    "dapo_exhausted": "§2 says only 'give up after max_num_gen_batches'; train = update on the groups kept so "
    "far (when none was kept: on the last generation batch as is, whose accuracy advantages are all 0), "
    "error = stop the run with an error as verl's DAPO trainer does",
    "local_norm": "§3.4 defines J_local per prompt (no 1/G); prompts = mean over the mini-batch's prompts like "
    "J_GRPO (default), correct_prompts = mean over the prompts that have a correct rollout, none = plain sum",
}


def _f(help: str, choices: tuple[str, ...] | None = None) -> Any:
    return dataclasses.field(metadata={"help": help, **({"choices": choices} if choices else {})})


@dataclasses.dataclass(frozen=True)
class ObjectiveConfig:
    """The objective settings of one run (see :data:`ALGO_DEFAULTS`); validated on construction.

    Build one with :func:`objective_config` (the algorithm's defaults plus overrides)."""

    algo: str = _f("objective: grpo | dapo | dsdr | dsdr_wo_gd | dsdr_wo_gc | darling", tuple(ALGO_DEFAULTS))
    std_mode: str = _f("advantage normalisation: population | bessel | none (§1, Eq. 1)", STD_MODES)
    eps: float = _f("eps in A = (r - mean) / (std + eps) (§1, Eq. 1: 1e-6)")
    clip_ratio_low: float = _f("PPO clip eps_low (§1, Eq. 3: 0.2)")
    clip_ratio_high: float = _f("PPO clip eps_high (§1, Eq. 3: GRPO 0.2, DAPO/DSDR 0.28)")
    log_ratio_clamp: float = _f("clamp of the log importance ratio before exp (§1, Eq. 2: 20)")
    loss_agg_mode: str = _f("token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm "
                            "(§1, Eq. 4a-4d)", LOSS_AGG_MODES)
    adv_estimator: str = _f("advantage estimator, by name in core_algos.ADV_ESTIMATOR_REGISTRY (grpo: §1, Eq. 1)")
    policy_loss: str = _f("policy loss, by name in core_algos.POLICY_LOSS_REGISTRY (vanilla: §1, Eq. 3)")
    reward: str = _f("reward shaping, by name in core_algos.REWARD_SHAPING_REGISTRY: verifier | dsdr (§3.2 bonus) "
                     "| darling (§4 r*Div)")
    lambda_d: float = _f("DSDR correct-only diversity bonus weight (§3.2, Eq. 11: 0.001)")
    sigma_d: float = _f("DSDR diversity clip bound (§3.2, Eq. 10: 1.0, not given in the paper)")
    tau: float = _f("DSDR coupling softmax temperature (§3.3, Eq. 12: 5)")
    uniform_coupling: bool = _f("coupling weights uniform over correct rollouts (§3.6 w/o GD)")
    local_term: bool = _f("add the DSDR local entropy term lambda_l * J_local (§3.4, Eq. 13)")
    lambda_l: float = _f("DSDR local term weight (§3.5, Eq. 14: 0.001)")
    use_kl: bool = _f("KL penalty to the frozen initial policy (§1, Eq. 5: off); set with kl_coef")
    kl_coef: float = _f("beta of the KL penalty (§1: 0)")
    kl_estimator: str = _f("KL estimator (low_var_kl = k3, the only one implemented)")
    dynamic_sampling: bool = _f("DAPO: drop zero-variance-accuracy groups and resample (§2)")
    max_num_gen_batches: int = _f("DAPO: stop resampling after this many generation batches (§2: 10)")
    dapo_exhausted: str = _f("DAPO, max_num_gen_batches reached with the batch not full: train (on the groups "
                             "kept; default) | error (stop, as verl does)", DAPO_EXHAUSTED)
    singleton_advantage: str = _f("advantage of a group of one rollout: zero (default) | reward "
                                  "(verl: mean 0, std 1)", SINGLETON_ADVANTAGES)
    local_norm: str = _f("divisor of the mini-batch sum of J_local (§3.4 is per prompt): prompts (default) | "
                         "correct_prompts (prompts with a correct rollout) | none (plain sum)", LOCAL_NORMS)
    overlong_shaping: bool = _f("DAPO overlong reward shaping (§2, Eq. 6)")
    overlong_buffer: int | None = _f("DAPO overlong buffer in tokens (§2, Eq. 6: max_response_length // 4)")
    overlong_factor: float = _f("DAPO overlong penalty factor (§2, Eq. 6: 1.0)")
    darling_floor: float = _f("DARLING Div floor (§4, Eq. 15: 0.1)")

    def __post_init__(self) -> None:
        if self.std_mode not in STD_MODES:
            raise ValueError(f"std_mode: unknown {self.std_mode!r}; expected one of {STD_MODES}")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(f"loss_agg_mode: unknown {self.loss_agg_mode!r}; expected one of {LOSS_AGG_MODES}")
        for name, allowed in (("dapo_exhausted", DAPO_EXHAUSTED), ("singleton_advantage", SINGLETON_ADVANTAGES),
                              ("local_norm", LOCAL_NORMS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: unknown {getattr(self, name)!r}; expected one of {allowed}")
        if self.kl_estimator != "low_var_kl":
            raise ValueError(f"kl_estimator: only 'low_var_kl' is implemented, got {self.kl_estimator!r}")
        for name in ("eps", "lambda_d", "tau", "lambda_l", "kl_coef", "overlong_factor"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.clip_ratio_low < 1 or not self.clip_ratio_high >= 0:
            raise ValueError(f"clip ratios out of range: ({self.clip_ratio_low}, {self.clip_ratio_high})")
        if not self.sigma_d > 0 or not self.log_ratio_clamp > 0:
            raise ValueError("sigma_d and log_ratio_clamp must be > 0")
        if not 0 <= self.darling_floor <= 1:
            raise ValueError(f"darling_floor must be in [0, 1], got {self.darling_floor}")
        if self.max_num_gen_batches < 1:
            raise ValueError(f"max_num_gen_batches must be >= 1, got {self.max_num_gen_batches}")
        if self.overlong_buffer is not None and self.overlong_buffer <= 0:
            raise ValueError(f"overlong_buffer must be > 0 or None, got {self.overlong_buffer}")
        if not self.local_term and self.lambda_l != 0:
            raise ValueError("lambda_l is ignored when local_term is off: set lambda_l = 0 (or local_term = True)")
        if self.use_kl != (self.kl_coef > 0):
            raise ValueError(f"use_kl={self.use_kl} disagrees with kl_coef={self.kl_coef}: set both")
        if self.lambda_d > 0 and self.reward != "dsdr":
            raise ValueError(f"lambda_d > 0 needs reward='dsdr', got reward={self.reward!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def objective_config(algo: str, **overrides: Any) -> ObjectiveConfig:
    """:class:`ObjectiveConfig` for ``algo`` from :data:`ALGO_DEFAULTS`, with ``overrides``
    (an unknown key is an error naming the valid ones)."""
    if algo not in ALGO_DEFAULTS:
        raise ValueError(f"unknown algo {algo!r}; expected one of {sorted(ALGO_DEFAULTS)}")
    settings = dict(ALGO_DEFAULTS[algo])
    unknown = sorted(set(overrides) - set(settings))
    if unknown:
        raise ValueError(f"unknown objective setting(s) {unknown}; valid: {sorted(settings)}")
    settings.update(overrides)
    return ObjectiveConfig(algo=algo, **settings)