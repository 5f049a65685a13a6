"""Evaluation protocols (frozen): the one model (``Phase`` / ``Protocol``), the named ones, protocol
files, and the per-request seeds.

The model is both what a run is given (``Protocol(...)``, strict: every value checked) and what a
report reads back from a run directory (``Protocol.from_record`` of config.json's ``protocol``,
tolerant: None = not recorded); ``comparable_key`` is what two runs must share to sit in one table.

``dsdr-paper`` is the DSDR paper's Table 3 protocol (docs/ALGORITHMS.md §5):
* phase ``pass1``: one rollout per problem at T=0.1, top-p 0.9 -> the paper's Pass@1;
* phase ``sampling``: 64 rollouts at T=0.7, top-p 0.9 -> Avg@16 (first 16), Avg@64 and the
  unbiased Pass@k for every power of two k <= 64 (computed by dsdr_eval.scoring.metrics);
* max response length 4096 tokens (8192 for the Qwen3 runs: ``--max-tokens 8192``).

``darling-paper`` is the DARLING paper's math protocol (docs/ALGORITHMS.md §5): one ``sampling``
phase of 256 rollouts at T=0.6, top-p 0.95 -> its pass@1 (the unbiased estimator at k=1, i.e. the
mean correctness of the 256 samples) and pass@k up to 128. The specification does not give its
response length; we default to 8192 tokens (the project's length for Qwen3-family models, which
DARLING's math runs train) -- ``--max-tokens`` overrides it.

A protocol file (``--protocol my.yaml`` or ``.json``, :func:`load_protocol_file`) defines a protocol
without code::

    name: my-protocol            # recorded in config.json
    phases:                      # one or both of pass1 / sampling
      - {phase: sampling, n: 32, temperature: 0.8, top_p: 0.95}
    max_tokens: 4096
    seed: 0                      # optional (default 0)
    extraction: boxed            # optional: the answer convention (dsdr_eval.grading.extraction profiles)
    stop: ["\n\nProblem:"]       # optional: stop strings; a completion ends before the first one

A protocol's ``stop`` strings end every completion before the first occurrence of any of them (the
vLLM / OpenAI convention: the stop string is not in the output; finish reason ``stop``), in every
backend alike (``dsdr_eval.backends.sampling.trim_at_stop``). They change the generated samples, so
they are part of the run identity (``to_config``: written only when given, so a run without them
keeps its identity); ``run --stop STR`` (repeatable) replaces them.

A protocol names its extraction profile (how the final answer is read from a completion,
``dsdr_eval.grading.extraction.EXTRACTION_PROFILES``); every built-in one reads the papers' ``\\boxed{}``
(``boxed``). It is recorded as config.json's top-level ``extraction`` and is not part of the run
identity (``to_config``): it changes no generated sample, only how they are graded.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import InitVar, asdict, dataclass, replace
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.extraction import DEFAULT_EXTRACTION, EXTRACTION_PROFILES
from dsdr_eval.names import PASS1 as PHASE_PASS1  # the phase names of the sample schema (dsdr_eval.names)
from dsdr_eval.names import PHASES
from dsdr_eval.names import SAMPLING as PHASE_SAMPLING

_SEED_MODULUS = 2**31 - 1  # fits every engine's seed type (torch, vLLM, OpenAI `seed`)


@dataclass(frozen=True)
class Phase:
    """One sampling phase, as a run is given it and as a report reads it back.

    ``Phase(...)`` is strict: every value is checked (a run must be given a complete, valid phase).
    ``Phase.from_record`` reads one back from config.json (or from graded.jsonl's per-sample fields)
    tolerantly: a value the record does not hold is None ("?" in a report; ``describe``), and a
    ``top_k`` / ``min_p`` a config.json leaves out is off, as ``to_config`` writes an off one."""

    phase: str  # "pass1" or "sampling" (the sample line's `phase`)
    n: int | None  # rollouts per problem
    temperature: float | None  # 0 = greedy
    top_p: float | None
    # the k most likely tokens only (0 = off) and the min-p cut (0 = off): thinking models' recommended
    # sampling uses them (Qwen3: top-k 20); the paper's protocols leave both off
    top_k: int | None = 0
    min_p: float | None = 0.0
    strict: InitVar[bool] = True  # False: a record read back (from_record); dataclasses.replace checks again

    def __post_init__(self, strict: bool) -> None:
        if not strict:
            return
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise DsdrError(f"phase {self.phase}: top_k must be an integer >= 0, 0 = off (got {self.top_k})")
        if self.min_p is None or not 0 <= self.min_p < 1:
            raise DsdrError(f"phase {self.phase}: min_p must be in [0, 1), 0 = off (got {self.min_p})")
        if self.n is None or self.n < 1:
            raise DsdrError(f"phase {self.phase}: n must be >= 1 (got {self.n})")
        if self.temperature is None or self.temperature < 0:
            raise DsdrError(f"phase {self.phase}: temperature must be >= 0 (got {self.temperature})")
        if self.top_p is None or not 0 < self.top_p <= 1:
            raise DsdrError(f"phase {self.phase}: top_p must be in (0, 1] (got {self.top_p})")

    @classmethod
    def from_record(cls, record: Mapping[str, Any], *, cuts_known: bool = True) -> Phase:
        """A phase of config.json's ``protocol.phases`` (types checked by ``rundir.result_fields.check_config``);
        fields this model does not know are ignored. ``run`` writes top_k / min_p only when on (absent: off);
        an imported tool's file does not say (``cuts_known=False``: absent is unknown, None)."""
        top_k, min_p = (0, 0.0) if cuts_known else (None, None)
        return cls(str(record["phase"]), record.get("n"), record.get("temperature"), record.get("top_p"),
                   top_k=record.get("top_k", top_k), min_p=record.get("min_p", min_p), strict=False)

    def describe(self) -> str:
        """``pass1: n=1, T=0.1, top-p=0.9`` (+ ``, top-k=20`` / ``, min-p=0.05`` when on, ``=?`` when unknown)."""
        text = f"{self.phase}: n={_shown(self.n)}, T={_shown(self.temperature)}, top-p={_shown(self.top_p)}"
        return text + "".join(f", {title}={_shown(value)}" for title, value in (("top-k", self.top_k),
                                                                                ("min-p", self.min_p)) if value != 0)


# What makes two phases' numbers incomparable (a report refuses to put them side by side): every
# sampling setting of the phase. Also the order `protocol_differences` lists them in.
PHASE_COMPARED = ("n", "temperature", "top_p", "top_k", "min_p")


def _shown(value: Any) -> str:
    return "?" if value is None else str(value)


@dataclass(frozen=True)
class Protocol:
    """What a run is given (``Protocol(...)``: strict) and what a report reads back (``from_record``:
    tolerant, None = not recorded). ``comparable_key`` is what must match across a report's table."""

    name: str | None  # None: read back from a run without config.json
    phases: tuple[Phase, ...]
    max_tokens: int | None
    seed: int | None = 0
    extraction: str = DEFAULT_EXTRACTION  # answer convention (not in to_config: grading only)
    stop: tuple[str, ...] = ()  # stop strings (module docstring); part of the identity when given
    strict: InitVar[bool] = True  # False: a record read back (from_record); dataclasses.replace checks again

    def __post_init__(self, strict: bool) -> None:
        if not strict:
            return
        if not isinstance(self.stop, tuple) or not all(isinstance(s, str) and s for s in self.stop):
            raise DsdrError(f"protocol {self.name}: stop must be a tuple of non-empty strings (got {self.stop!r})")
        if self.extraction not in EXTRACTION_PROFILES:
            raise DsdrError(f"protocol {self.name}: unknown extraction profile {self.extraction!r} "
                            f"(known: {', '.join(EXTRACTION_PROFILES)})")
        if not self.phases:
            raise DsdrError(f"protocol {self.name}: no phases")
        names = [p.phase for p in self.phases]
        if len(set(names)) != len(names):
            raise DsdrError(f"protocol {self.name}: duplicate phase names {names}")
        if self.max_tokens is None or self.max_tokens < 1:
            raise DsdrError(f"protocol {self.name}: max_tokens must be >= 1 (got {self.max_tokens})")

    @classmethod
    def from_record(cls, record: Mapping[str, Any], *, extraction: str = DEFAULT_EXTRACTION,
                    cuts_known: bool = True) -> Protocol:
        """config.json's ``protocol`` object (``to_config``'s output, of this or an older version; types
        checked by ``rundir.result_fields.check_config``): a field it lacks is None (a phase's top_k /
        min_p: see ``Phase.from_record``), a field this model does not know is ignored."""
        phases = tuple(Phase.from_record(ph, cuts_known=cuts_known) for ph in record.get("phases") or [])
        stop = record.get("stop")
        return cls(record.get("name"), phases, record.get("max_tokens"), record.get("seed"), extraction,
                   tuple(str(s) for s in stop) if isinstance(stop, list) else (), strict=False)

    def to_config(self) -> dict[str, Any]:
        return {"name": self.name, "phases": [_phase_config(p) for p in self.phases],
                "max_tokens": self.max_tokens, "seed": self.seed, **({"stop": list(self.stop)} if self.stop else {})}

    def total_samples_per_problem(self) -> int:
        return sum(p.n for p in self.phases)

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.phase == name), None)

    def comparable_key(self) -> tuple:
        """Every sampling setting that moves a published number: each phase's PHASE_COMPARED and max tokens
        (the name, seed and extraction profile are reported, not matched)."""
        return (tuple(sorted((p.phase, *(getattr(p, f) for f in PHASE_COMPARED)) for p in self.phases)),
                self.max_tokens)

def _phase_config(phase: Phase) -> dict[str, Any]:
    """A phase as config.json records it: top_k / min_p only when on, so a run made before they existed
    keeps its identity."""
    record = asdict(phase)
    for name, off in (("top_k", 0), ("min_p", 0.0)):
        if record[name] == off:
            del record[name]
    return record


PROTOCOLS: dict[str, Protocol] = {
    # docs/ALGORITHMS.md §5 / DSDR paper Table 3.
    "dsdr-paper": Protocol("dsdr-paper", (Phase(PHASE_PASS1, 1, 0.1, 0.9), Phase(PHASE_SAMPLING, 64, 0.7, 0.9)),
                           max_tokens=4096),
    # docs/ALGORITHMS.md §5 / DARLING's math evaluation: pass@1 and pass@128 from 256 samples.
    # Max tokens: not in the specification; 8192 is our default (see the module docstring).
    "darling-paper": Protocol("darling-paper", (Phase(PHASE_SAMPLING, 256, 0.6, 0.95),), max_tokens=8192),
    # One greedy rollout: deterministic accuracy, no Pass@k.
    "greedy": Protocol("greedy", (Phase(PHASE_PASS1, 1, 0.0, 1.0),), max_tokens=4096),
    # Smoke runs (`make demo`): the paper's shape at a tiny size.
    "quick": Protocol("quick", (Phase(PHASE_PASS1, 1, 0.1, 0.9), Phase(PHASE_SAMPLING, 4, 0.7, 0.9)),
                      max_tokens=256),
    # Thinking models (Qwen3's recommended thinking-mode sampling: T 0.6, top-p 0.95, top-k 20, min-p 0;
    # greedy decoding is discouraged for them, so no pass1 phase), with a budget long traces fit in:
    # a trace the budget cuts off is graded `truncated`, never correct.
    "thinking": Protocol("thinking", (Phase(PHASE_SAMPLING, 16, 0.6, 0.95, top_k=20),), max_tokens=32768),
}


PROTOCOL_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def get_protocol(name: str) -> Protocol:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise DsdrError(f"--protocol {name}: unknown protocol (known: {', '.join(PROTOCOLS)}; "
                        f"or a protocol file {'/'.join(PROTOCOL_FILE_SUFFIXES)})") from None


def resolve_protocol(spec: str) -> Protocol:
    """``--protocol``: a built-in name (:data:`PROTOCOLS`) or the path of a protocol file."""
    if spec in PROTOCOLS:
        return PROTOCOLS[spec]
    if Path(spec).suffix.lower() in PROTOCOL_FILE_SUFFIXES or Path(spec).is_file():
        return load_protocol_file(Path(spec))
    return get_protocol(spec)


def protocol_file_record(path: Path) -> dict[str, Any]:
    """Where a file protocol came from (config.json ``protocol_file``; not part of the run identity,
    which is the protocol's content: the same definition from another file is the same protocol)."""
    return {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


# ----------------------------------------------------------------------------- protocol files

_TOP_FIELDS = {"name": True, "phases": True, "max_tokens": True, "seed": False, "extraction": False,
               "stop": False}  # -> required
_PHASE_FIELDS = ("phase", "n", "temperature", "top_p")
_OPTIONAL_PHASE_FIELDS = ("top_k", "min_p")  # 0 = off


def load_protocol_file(path: Path) -> Protocol:
    """A protocol from a YAML or JSON file (format: the module docstring). Every problem is one
    ``DsdrError`` line ``FILE:FIELD: what is wrong``; unknown fields are refused (a typo must not
    silently fall back to a default). A file may reuse a built-in name only with its exact settings."""
    where = str(path)
    if not path.is_file():
        raise DsdrError(f"{where}: no such protocol file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DsdrError(f"{where}: cannot read the protocol file ({exc})") from None
    data = _parse_protocol_text(text, where, json_only=path.suffix.lower() == ".json")
    if not isinstance(data, dict):
        raise DsdrError(f"{where}: expected a mapping with {', '.join(_TOP_FIELDS)} (got {_type_name(data)})")
    for key in data:
        if key not in _TOP_FIELDS:
            raise DsdrError(f"{where}:{key}: unknown field (fields: {', '.join(_TOP_FIELDS)})")
    for key, required in _TOP_FIELDS.items():
        if required and key not in data:
            raise DsdrError(f"{where}:{key}: missing field")
    name = data["name"]
    if not isinstance(name, str) or not name.strip():
        raise DsdrError(f"{where}:name: must be a non-empty string (got {_type_name(name)})")
    raw_phases = data["phases"]
    if not isinstance(raw_phases, list) or not raw_phases:
        raise DsdrError(f"{where}:phases: must be a non-empty list of phases (got {_type_name(raw_phases)})")
    phases = tuple(_file_phase(item, f"{where}:phases[{i}]") for i, item in enumerate(raw_phases))
    seen: set[str] = set()
    for i, phase in enumerate(phases):
        if phase.phase in seen:
            raise DsdrError(f"{where}:phases[{i}].phase: {phase.phase!r} appears twice")
        seen.add(phase.phase)
    max_tokens = _integer(data["max_tokens"], f"{where}:max_tokens", minimum=1)
    seed = _integer(data.get("seed", 0), f"{where}:seed", minimum=0)
    extraction = data.get("extraction", DEFAULT_EXTRACTION)
    if not isinstance(extraction, str) or extraction not in EXTRACTION_PROFILES:
        raise DsdrError(f"{where}:extraction: unknown extraction profile ({_type_name(extraction)}; "
                        f"known: {', '.join(EXTRACTION_PROFILES)})")
    protocol = Protocol(name.strip(), phases, max_tokens=max_tokens, seed=seed, extraction=extraction,
                        stop=_stop_strings(data.get("stop", []), f"{where}:stop"))
    builtin = PROTOCOLS.get(protocol.name)
    if builtin is not None and builtin != protocol:
        raise DsdrError(f"{where}:name: {protocol.name!r} is a built-in protocol with other settings "
                        "(a run must not pass for it); choose another name")
    return protocol


def _parse_protocol_text(text: str, where: str, *, json_only: bool) -> Any:
    if json_only:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise DsdrError(f"{where}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise DsdrError(f"{where}{line}: not valid YAML ({problem})") from None


def _file_phase(item: Any, where: str) -> Phase:
    if not isinstance(item, dict):
        raise DsdrError(f"{where}: must be a mapping with {', '.join(_PHASE_FIELDS)} (got {_type_name(item)})")
    for key in item:
        if key not in _PHASE_FIELDS + _OPTIONAL_PHASE_FIELDS:
            raise DsdrError(f"{where}.{key}: unknown field (fields: {', '.join(_PHASE_FIELDS + _OPTIONAL_PHASE_FIELDS)})")
    for key in _PHASE_FIELDS:
        if key not in item:
            raise DsdrError(f"{where}.{key}: missing field")
    phase = item["phase"]
    if phase not in PHASES:
        raise DsdrError(f"{where}.phase: must be one of {', '.join(PHASES)} (got {phase!r})")
    n = _integer(item["n"], f"{where}.n", minimum=1)
    temperature = _number(item["temperature"], f"{where}.temperature")
    if temperature < 0:
        raise DsdrError(f"{where}.temperature: must be >= 0 (got {temperature})")
    top_p = _number(item["top_p"], f"{where}.top_p")
    if not 0 < top_p <= 1:
        raise DsdrError(f"{where}.top_p: must be in (0, 1] (got {top_p})")
    top_k = _integer(item.get("top_k", 0), f"{where}.top_k", minimum=0)
    min_p = _number(item.get("min_p", 0.0), f"{where}.min_p")
    if not 0 <= min_p < 1:
        raise DsdrError(f"{where}.min_p: must be in [0, 1) (got {min_p})")
    return Phase(phase, n, temperature, top_p, top_k=top_k, min_p=min_p)


def _stop_strings(value: Any, where: str) -> tuple[str, ...]:
    """A protocol file's ``stop``: a list of non-empty strings (a single string is refused: a YAML typo
    would otherwise stop at each of its characters in engines that iterate it)."""
    if not isinstance(value, list):
        raise DsdrError(f"{where}: must be a list of strings (got {_type_name(value)})")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise DsdrError(f"{where}[{i}]: must be a non-empty string (got {_type_name(item)})")
    return tuple(value)


def _integer(value: Any, where: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DsdrError(f"{where}: must be an integer (got {_type_name(value)})")
    if value < minimum:
        raise DsdrError(f"{where}: must be >= {minimum} (got {value})")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DsdrError(f"{where}: must be a finite number (got {_type_name(value)})")
    return float(value)


def _type_name(value: Any) -> str:
    if isinstance(value, (bool, int, float)) or value is None:
        return f"{type(value).__name__} {value!r}"
    return f"{type(value).__name__} {str(value)[:40]!r}" if isinstance(value, str) else type(value).__name__


def apply_overrides(protocol: Protocol, *, n: int | None = None, temperature: float | None = None,
                    top_p: float | None = None, pass1_temperature: float | None = None,
                    pass1_top_p: float | None = None, max_tokens: int | None = None,
                    seed: int | None = None, phases: list[str] | None = None, top_k: int | None = None,
                    min_p: float | None = None, pass1_top_k: int | None = None,
                    pass1_min_p: float | None = None, stop: list[str] | None = None) -> Protocol:
    """Return the protocol with command-line overrides applied.

    ``n``/``temperature``/``top_p``/``top_k``/``min_p`` act on the ``sampling`` phase (or on the only
    phase of a one-phase protocol); the ``pass1_*`` ones on ``pass1``; ``phases`` keeps only the named phases;
    ``stop`` (non-empty) replaces the protocol's stop strings.
    Any override marks the name with ``+custom`` so a tweaked run never passes for the paper's."""
    new_phases: list[Phase] = []
    target_sampling = PHASE_SAMPLING if any(p.phase == PHASE_SAMPLING for p in protocol.phases) else None
    for phase in protocol.phases:
        is_main = phase.phase == target_sampling or (target_sampling is None and len(protocol.phases) == 1)
        if is_main:
            phase = replace(phase, n=phase.n if n is None else n,
                            temperature=phase.temperature if temperature is None else temperature,
                            top_p=phase.top_p if top_p is None else top_p,
                            top_k=phase.top_k if top_k is None else top_k,
                            min_p=phase.min_p if min_p is None else min_p)
        if phase.phase == PHASE_PASS1:
            phase = replace(phase, temperature=phase.temperature if pass1_temperature is None else pass1_temperature,
                            top_p=phase.top_p if pass1_top_p is None else pass1_top_p,
                            top_k=phase.top_k if pass1_top_k is None else pass1_top_k,
                            min_p=phase.min_p if pass1_min_p is None else pass1_min_p)
        new_phases.append(phase)
    if phases is not None:
        unknown = sorted(set(phases) - {p.phase for p in new_phases})
        if unknown:
            raise DsdrError(f"--phases: protocol {protocol.name} has no phase {', '.join(unknown)} "
                            f"(it has {', '.join(p.phase for p in new_phases)})")
        new_phases = [p for p in new_phases if p.phase in phases]
    updated = replace(protocol, phases=tuple(new_phases),
                      max_tokens=protocol.max_tokens if max_tokens is None else max_tokens,
                      seed=protocol.seed if seed is None else seed,
                      stop=tuple(stop) if stop else protocol.stop)
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
