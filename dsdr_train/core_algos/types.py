"""The types the registries' signatures name, in a module of their own: the registry
(:mod:`.registry`) and the implementations (:mod:`.rewards`, ...) both import it, and it imports
neither, so the package's import graph stays acyclic (``TYPE_CHECKING`` imports included)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class RolloutSignals:
    """What the reward shapings read about one batch of rollouts (all ``[B]``, one row per rollout).

    ``accuracy``: the verifier's 0/1 outcome (float64); ``group_ids``: long, one id per prompt;
    ``response_lengths``: tokens per response; ``diversity``: DSDR's ``d_i`` (§3.1, Eq. 9) or None
    when not computed; ``darling_div``: DARLING's ``Div`` (§4, Eq. 15) or None."""

    accuracy: Tensor
    group_ids: Tensor
    response_lengths: Tensor
    max_response_length: int
    diversity: Tensor | None = None
    darling_div: Tensor | None = None

    def required(self, name: str, reward: str) -> Tensor:
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"reward {reward!r} needs the rollouts' {name}, which was not computed")
        return value
