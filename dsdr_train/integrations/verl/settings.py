"""The plugin's settings: which dsdr objective a verl estimator name runs, and the ``dsdr:`` block.

verl-free and torch-free (parsed on the driver before any worker starts). A run picks its
objective with verl's own key, ``algorithm.adv_estimator=<name>``; the name fixes the algorithm's
defaults from :data:`dsdr_train.objective.ALGO_DEFAULTS` (advantage normalisation, reward shaping,
coupling, local term). The few settings the papers leave tunable come from an optional top-level
Hydra block, e.g. ``+dsdr.lambda_d=0.001 +dsdr.tau=5``. The clip bounds and the loss aggregation
are verl's own keys (``actor_rollout_ref.actor.clip_ratio_low`` ..., ``loss_agg_mode``): the
recipes set them to the algorithm's values; they are not repeated here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dsdr_train.objective import ObjectiveConfig, objective_config

# verl estimator name -> dsdr algorithm (dsdr_train.objective.ALGO_DEFAULTS)
ESTIMATOR_ALGOS: dict[str, str] = {
    "dsdr": "dsdr",
    "dsdr_wo_gd": "dsdr_wo_gd",
    "dsdr_wo_gc": "dsdr_wo_gc",
    "darling": "darling",
    # GRPO with the population std of docs/ALGORITHMS.md §1 (verl's built-in `grpo` divides by G-1)
    "grpo_pop_std": "grpo",
}
# ObjectiveConfig keys a `dsdr:` block may override (the others are fixed by the estimator name or
# are verl's own config keys)
OBJECTIVE_OVERRIDES = ("lambda_d", "sigma_d", "tau", "lambda_l", "local_norm", "darling_floor", "log_ratio_clamp")
# J_local's divisor in verl: the worker sees one micro-batch, so only batch-independent divisors
PLUGIN_LOCAL_NORMS = ("prompts", "none")
# darling partitions that need no dsdr grading (verl's reward gives no answer classes)
PLUGIN_PARTITIONS = ("embedding", "classifier", "judge")


class PluginConfigError(ValueError):
    """A ``dsdr:`` block or estimator name the plugin cannot run (the message names the key)."""


@dataclasses.dataclass(frozen=True)
class PluginSettings:
    """Everything the plugin reads about a run. ``formula_rules`` and ``objective`` are also what
    :func:`dsdr_train.scoring.darling_diversity` reads of its config argument."""

    estimator: str
    objective: ObjectiveConfig
    encoder: str | None = None
    encoder_device: str = "cpu"
    encoder_chunked: bool = False
    encoder_max_seq_length: int | None = None
    formula_rules: str = "extended"
    darling_partition: str = "embedding"
    darling_threshold: float | None = None

    @property
    def shapes_rewards(self) -> bool:
        """True when the trainer must replace verl's score by a group-level reward (§3.2 / §4)."""
        return self.objective.reward in ("dsdr", "darling")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["objective"] = self.objective.to_dict()
        return out


_RUN_KEYS = tuple(f.name for f in dataclasses.fields(PluginSettings) if f.name not in ("estimator", "objective"))


def plugin_settings(estimator: str, block: Mapping[str, Any] | None = None) -> PluginSettings:
    """Settings for ``algorithm.adv_estimator=estimator`` and the run's ``dsdr:`` block (or None)."""
    if estimator not in ESTIMATOR_ALGOS:
        raise PluginConfigError(f"algorithm.adv_estimator: {estimator!r} is not a dsdr estimator; "
                                f"expected one of {sorted(ESTIMATOR_ALGOS)}")
    block = dict(block or {})
    unknown = sorted(set(block) - set(OBJECTIVE_OVERRIDES) - set(_RUN_KEYS))
    if unknown:
        raise PluginConfigError(f"dsdr.{unknown[0]}: not a plugin setting; valid: "
                                f"{sorted(OBJECTIVE_OVERRIDES + _RUN_KEYS)}")
    overrides = {k: block.pop(k) for k in list(block) if k in OBJECTIVE_OVERRIDES}
    algo = ESTIMATOR_ALGOS[estimator]
    if "lambda_l" in overrides and algo in ("grpo", "darling", "dsdr_wo_gc"):
        raise PluginConfigError(f"dsdr.lambda_l: estimator {estimator!r} has no local term")
    try:
        objective = objective_config(algo, **overrides)
    except ValueError as exc:
        raise PluginConfigError(f"dsdr block for estimator {estimator!r}: {exc}") from None
    if objective.local_norm not in PLUGIN_LOCAL_NORMS:
        raise PluginConfigError(f"dsdr.local_norm: {objective.local_norm!r} needs the correct prompts of each "
                                f"mini-batch, which verl's worker does not see; use one of {PLUGIN_LOCAL_NORMS}")
    partition = str(block.get("darling_partition", "embedding"))
    if partition.split(":", 1)[0] not in PLUGIN_PARTITIONS:
        raise PluginConfigError(f"dsdr.darling_partition: {partition!r} needs dsdr's grading answer classes; "
                                f"verl's reward gives none. Use one of {PLUGIN_PARTITIONS}")
    if block.get("formula_rules", "extended") not in ("extended", "diver"):
        raise PluginConfigError(f"dsdr.formula_rules: {block['formula_rules']!r}; expected extended | diver")
    return PluginSettings(estimator=estimator, objective=objective, **block)
