"""Named evaluation protocols (frozen) and the deterministic per-request seeds.

``dsdr-paper`` is the DSDR paper's Table 3 protocol (docs/ALGORITHMS.md §5):
* phase ``pass1``: one rollout per problem at T=0.1, top-p 0.9 -> the paper's Pass@1;
* phase ``sampling``: 64 rollouts at T=0.7, top-p 0.9 -> Avg@16 (first 16), Avg@64 and the
  unbiased Pass@k for k <= 64 (computed by dsdr_eval.metrics);
* max response length 4096 tokens (8192 for the Qwen3 runs: ``--max-tokens 8192``).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, replace
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.samples import PASS1 as PHASE_PASS1  # the phase names are defined in the sample schema
from dsdr_eval.samples import SAMPLING as PHASE_SAMPLING
_SEED_MODULUS = 2**31 - 1  # fits every engine's seed type (torch, vLLM, OpenAI `seed`)


@dataclass(frozen=True)
class Phase:
    phase: str  # "pass1" or "sampling" (the sample line's `phase`)
    n: int  # rollouts per problem
    temperature: float  # 0 = greedy
    top_p: float

    def __post_init__(self) -> None:
        if self.n < 1:
            raise DsdrError(f"phase {self.phase}: n must be >= 1 (got {self.n})")
        if self.temperature < 0:
            raise DsdrError(f"phase {self.phase}: temperature must be >= 0 (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise DsdrError(f"phase {self.phase}: top_p must be in (0, 1] (got {self.top_p})")


@dataclass(frozen=True)
class Protocol:
    name: str
    phases: tuple[Phase, ...]
    max_tokens: int
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.phases:
            raise DsdrError(f"protocol {self.name}: no phases")
        names = [p.phase for p in self.phases]
        if len(set(names)) != len(names):
            raise DsdrError(f"protocol {self.name}: duplicate phase names {names}")
        if self.max_tokens < 1:
            raise DsdrError(f"protocol {self.name}: max_tokens must be >= 1 (got {self.max_tokens})")

    def to_config(self) -> dict[str, Any]:
        return {"name": self.name, "phases": [asdict(p) for p in self.phases],
                "max_tokens": self.max_tokens, "seed": self.seed}

    def total_samples_per_problem(self) -> int:
        return sum(p.n for p in self.phases)


PROTOCOLS: dict[str, Protocol] = {
    # docs/ALGORITHMS.md §5 / DSDR paper Table 3.
    "dsdr-paper": Protocol("dsdr-paper", (Phase(PHASE_PASS1, 1, 0.1, 0.9), Phase(PHASE_SAMPLING, 64, 0.7, 0.9)),
                           max_tokens=4096),
    # One greedy rollout: deterministic accuracy, no Pass@k.
    "greedy": Protocol("greedy", (Phase(PHASE_PASS1, 1, 0.0, 1.0),), max_tokens=4096),
    # Smoke runs (`make demo`): the paper's shape at a tiny size.
    "quick": Protocol("quick", (Phase(PHASE_PASS1, 1, 0.1, 0.9), Phase(PHASE_SAMPLING, 4, 0.7, 0.9)),
                      max_tokens=256),
}


def get_protocol(name: str) -> Protocol:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise DsdrError(f"--protocol {name}: unknown protocol (known: {', '.join(PROTOCOLS)})") from None


def apply_overrides(protocol: Protocol, *, n: int | None = None, temperature: float | None = None,
                    top_p: float | None = None, pass1_temperature: float | None = None,
                    pass1_top_p: float | None = None, max_tokens: int | None = None,
                    seed: int | None = None, phases: list[str] | None = None) -> Protocol:
    """Return the protocol with command-line overrides applied.

    ``n``/``temperature``/``top_p`` act on the ``sampling`` phase (or on the only phase of a
    one-phase protocol); the ``pass1_*`` ones on ``pass1``; ``phases`` keeps only the named phases.
    Any override marks the name with ``+custom`` so a tweaked run never passes for the paper's."""
    new_phases: list[Phase] = []
    target_sampling = PHASE_SAMPLING if any(p.phase == PHASE_SAMPLING for p in protocol.phases) else None
    for phase in protocol.phases:
        is_main = phase.phase == target_sampling or (target_sampling is None and len(protocol.phases) == 1)
        if is_main:
            phase = replace(phase, n=phase.n if n is None else n,
                            temperature=phase.temperature if temperature is None else temperature,
                            top_p=phase.top_p if top_p is None else top_p)
        if phase.phase == PHASE_PASS1:
            phase = replace(phase, temperature=phase.temperature if pass1_temperature is None else pass1_temperature,
                            top_p=phase.top_p if pass1_top_p is None else pass1_top_p)
        new_phases.append(phase)
    if phases is not None:
        unknown = sorted(set(phases) - {p.phase for p in new_phases})
        if unknown:
            raise DsdrError(f"--phases: protocol {protocol.name} has no phase {', '.join(unknown)} "
                            f"(it has {', '.join(p.phase for p in new_phases)})")
        new_phases = [p for p in new_phases if p.phase in phases]
    updated = replace(protocol, phases=tuple(new_phases),
                      max_tokens=protocol.max_tokens if max_tokens is None else max_tokens,
                      seed=protocol.seed if seed is None else seed)
    if updated != protocol and not protocol.name.endswith("+custom"):
        updated = replace(updated, name=protocol.name + "+custom")
    return updated


def derive_seed(base_seed: int, *parts: object) -> int:
    """A seed from the run seed and a content key (benchmark, phase, problem id, ...).

    Keyed by content, never by position, so a resumed or re-ordered run asks the engine for the
    same random stream for the same (problem, phase) and regenerates the same text where the
    engine is deterministic."""
    key = "\x1f".join([str(base_seed), *map(str, parts)]).encode("utf-8")
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % _SEED_MODULUS
