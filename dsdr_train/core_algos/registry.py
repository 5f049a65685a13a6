"""Name registries of the objective's pluggable pieces, verl style: each registry has ONE
signature (the ``*Fn`` protocols below), and each is dispatched from ONE place, by the name the
run's :class:`~dsdr_train.objective.ObjectiveConfig` records:

* ``REWARD_SHAPING_REGISTRY[config.reward]`` in :func:`dsdr_train.core_algos.pipeline.shape_rewards`;
* ``ADV_ESTIMATOR_REGISTRY[config.adv_estimator]`` in the same function;
* ``POLICY_LOSS_REGISTRY[config.policy_loss]`` in :func:`dsdr_train.core_algos.pipeline.policy_loss`.

A second, different function under a registered name is an error, so two modules cannot
silently shadow each other. Shapes: ``B`` rollouts, ``T`` padded response length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from torch import Tensor

from dsdr_train.core_algos.types import RolloutSignals

if TYPE_CHECKING:
    from dsdr_train.objective import ObjectiveConfig


class RewardShapingFn(Protocol):
    def __call__(self, signals: RolloutSignals, config: ObjectiveConfig) -> Tensor:
        """``[B]`` float64 rewards the advantage is computed from, before the DAPO overlong term
        (which :func:`~dsdr_train.core_algos.pipeline.shape_rewards` adds to every shaping)."""


class AdvEstimatorFn(Protocol):
    def __call__(self, rewards: Tensor, group_ids: Tensor, *, std_mode: str, eps: float,
                 singleton: str) -> Tensor:
        """``rewards [B]``, ``group_ids [B]`` long -> ``[B]`` advantages (broadcast to tokens by the loss)."""


class PolicyLossFn(Protocol):
    def __call__(self, log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, response_mask: Tensor, *,
                 clip_ratio_low: float, clip_ratio_high: float, loss_agg_mode: str, clamp: float,
                 norm_constant: float | None = None, num_tokens: float | None = None,
                 num_sequences: float | None = None) -> tuple[Tensor, dict[str, float]]:
        """``[B, T]`` log-probs (with grad) / old log-probs, ``[B]`` or ``[B, T]`` advantages, ``[B, T]``
        mask -> (scalar loss to minimise, python-float stats)."""


F = TypeVar("F", bound=Callable[..., Any])

REWARD_SHAPING_REGISTRY: dict[str, RewardShapingFn] = {}
ADV_ESTIMATOR_REGISTRY: dict[str, AdvEstimatorFn] = {}
POLICY_LOSS_REGISTRY: dict[str, PolicyLossFn] = {}


def _registrar(registry: dict[str, Any], kind: str, name: str) -> Callable[[F], F]:
    def decorator(fn: F) -> F:
        existing = registry.get(name)
        if existing is not None and existing is not fn:
            raise ValueError(f"{kind} {name!r} is already registered ({existing.__qualname__})")
        registry[name] = fn
        return fn

    return decorator


def _lookup(registry: dict[str, Any], kind: str, name: str) -> Any:
    try:
        return registry[name]
    except KeyError:
        raise ValueError(f"unknown {kind} {name!r}; registered: {sorted(registry)}") from None


def register_reward_shaping(name: str) -> Callable[[F], F]:
    """Decorator: register a :class:`RewardShapingFn` under ``name`` (``ObjectiveConfig.reward``)."""
    return _registrar(REWARD_SHAPING_REGISTRY, "reward shaping", name)


def get_reward_shaping_fn(name: str) -> RewardShapingFn:
    return _lookup(REWARD_SHAPING_REGISTRY, "reward shaping", name)


def register_adv_estimator(name: str) -> Callable[[F], F]:
    """Decorator: register an :class:`AdvEstimatorFn` under ``name`` (``ObjectiveConfig.adv_estimator``)."""
    return _registrar(ADV_ESTIMATOR_REGISTRY, "advantage estimator", name)


def get_adv_estimator_fn(name: str) -> AdvEstimatorFn:
    return _lookup(ADV_ESTIMATOR_REGISTRY, "advantage estimator", name)


def register_policy_loss(name: str) -> Callable[[F], F]:
    """Decorator: register a :class:`PolicyLossFn` under ``name`` (``ObjectiveConfig.policy_loss``)."""
    return _registrar(POLICY_LOSS_REGISTRY, "policy loss", name)


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    return _lookup(POLICY_LOSS_REGISTRY, "policy loss", name)
