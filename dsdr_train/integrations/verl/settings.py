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
    # §2 DAPO: {0, 1} verifier reward + the overlong penalty (Eq. 6), dynamic sampling capped by the trainer
    "dapo": "dapo",
}
# ObjectiveConfig keys a `dsdr:` block may override (the others are fixed by the estimator name or
# are verl's own config keys)
OBJECTIVE_OVERRIDES = ("lambda_d", "sigma_d", "tau", "lambda_l", "local_norm", "darling_floor", "log_ratio_clamp",
                       "dynamic_sampling", "max_num_gen_batches", "dapo_exhausted", "overlong_shaping",
                       "overlong_buffer", "overlong_factor")
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
    encoder_device: str = "cpu"  # cpu | auto | cuda[:N] (see encoder_placement)
    encoder_chunked: bool = False
    encoder_max_seq_length: int | None = None
    formula_rules: str = "extended"
    solution_cut: str = "answer-end"  # what the diversity terms read (dsdr_eval.grading.solution)
    darling_partition: str = "embedding"
    darling_threshold: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["objective"] = self.objective.to_dict()
        return out


def encoder_placement(requested: str, *, cuda_available: bool) -> tuple[str, str]:
    """``(device, reason)`` of the diversity encoder in the trainer's process. verl runs the trainer
    inside its TaskRunner, a Ray actor given no GPU: ``cuda`` there would fail on the first step, so
    ``auto`` and ``cuda`` fall back to the CPU when no GPU is visible, with the reason (logged)."""
    if requested == "cpu":
        return "cpu", "dsdr.encoder_device=cpu"
    if cuda_available:
        device = "cuda" if requested == "auto" else requested
        return device, f"dsdr.encoder_device={requested}: a CUDA device is visible to the trainer process"
    return "cpu", (f"dsdr.encoder_device={requested}: no CUDA device is visible to the trainer process (verl's "
                   "TaskRunner is a Ray actor without a GPU), so the encoder runs on the CPU")


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
    if "lambda_l" in overrides and algo in ("grpo", "dapo", "darling", "dsdr_wo_gc"):
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
    device = str(block.get("encoder_device", "cpu"))
    if device not in ("cpu", "auto", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise PluginConfigError(f"dsdr.encoder_device: {device!r}; expected cpu | auto | cuda | cuda:N")
    if block.get("formula_rules", "extended") not in ("extended", "diver"):
        raise PluginConfigError(f"dsdr.formula_rules: {block['formula_rules']!r}; expected extended | diver")
    if block.get("solution_cut", "answer-end") not in ("answer-end", "none"):
        raise PluginConfigError(f"dsdr.solution_cut: {block['solution_cut']!r}; expected answer-end | none")
    return PluginSettings(estimator=estimator, objective=objective, **block)
