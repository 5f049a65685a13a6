"""Score a samples file: validate -> grade (grading.py) -> metrics (metrics.py) -> write files.

``score_run_dir(RUN_DIR)`` reads ``RUN_DIR/samples.jsonl`` and writes ``graded.jsonl`` and
``metrics.json`` next to it; ``score_samples(path, out_dir)`` does the same for any samples file.
Existing ``diversity`` / ``judge`` keys of each benchmark in ``metrics.json`` are kept, so
re-scoring never loses what ``dsdr-eval diversity`` / ``dsdr-eval judge`` computed.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from dsdr_eval.answer_norm import GradingOptions
from dsdr_eval import rundir
from dsdr_eval.errors import DsdrError
from dsdr_eval.grading import grade_samples, grader_provenance
from dsdr_eval.jsonl import iter_jsonl_numbered, read_json, write_json, write_jsonl
from dsdr_eval.metrics import DEFAULT_BENCHMARK, PASS1, SAMPLING, compute_metrics

REQUIRED_SAMPLE_FIELDS = ("problem_id", "gold", "completion")
PHASES = (PASS1, SAMPLING)
PRESERVED_BENCHMARK_KEYS = ("diversity", "judge")  # written by other subcommands


def load_samples(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate a samples JSONL; errors name ``file:line:field``.

    A partial last line (a generation run killed mid-append) is skipped, like the run loop does.
    ``sample_idx`` defaults to the order of appearance within (benchmark, phase, problem_id);
    ``phase`` to "sampling"."""
    path = Path(path)
    if not path.is_file():
        raise DsdrError(f"{path}: samples file not found")
    rows: list[dict[str, Any]] = []
    keys: dict[tuple, int] = {}
    golds: dict[tuple[str, str], tuple[str, int]] = {}
    next_idx: dict[tuple, int] = {}
    for lineno, row in iter_jsonl_numbered(path, tolerate_truncated_tail=True):
        for name in REQUIRED_SAMPLE_FIELDS:
            if name not in row or row[name] is None:
                raise DsdrError(f"{path}:{lineno}:{name}: missing required field '{name}'")
        for name in ("problem_id", "gold"):
            value = row[name]
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise DsdrError(f"{path}:{lineno}:{name}: must be a string (got {type(value).__name__})")
            row[name] = value if isinstance(value, str) else (str(int(value)) if float(value).is_integer() else str(value))
        if not row["gold"].strip():
            raise DsdrError(f"{path}:{lineno}:gold: empty gold answer")
        if not isinstance(row["completion"], str):
            raise DsdrError(f"{path}:{lineno}:completion: must be a string (got {type(row['completion']).__name__})")
        benchmark = row.get("benchmark")
        if benchmark is not None and not isinstance(benchmark, str):
            raise DsdrError(f"{path}:{lineno}:benchmark: must be a string")
        phase = row.setdefault("phase", SAMPLING)
        if phase not in PHASES:
            raise DsdrError(f"{path}:{lineno}:phase: must be one of {', '.join(PHASES)} (got {phase!r})")
        group = (benchmark or DEFAULT_BENCHMARK, phase, row["problem_id"])
        if "sample_idx" not in row or row["sample_idx"] is None:
            row["sample_idx"] = next_idx.get(group, 0)
        idx = row["sample_idx"]
        if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
            raise DsdrError(f"{path}:{lineno}:sample_idx: must be a non-negative integer (got {idx!r})")
        next_idx[group] = max(next_idx.get(group, 0), idx + 1)
        key = (*group, idx)
        if key in keys:
            raise DsdrError(f"{path}:{lineno}:sample_idx: duplicate sample {key} (first on line {keys[key]})")
        keys[key] = lineno
        problem = (group[0], row["problem_id"])
        if problem in golds and golds[problem][0] != row["gold"]:
            raise DsdrError(f"{path}:{lineno}:gold: {row['gold']!r} differs from {golds[problem][0]!r} "
                            f"given for the same problem on line {golds[problem][1]}")
        golds.setdefault(problem, (row["gold"], lineno))
        rows.append(row)
    if not rows:
        raise DsdrError(f"{path}: no samples")
    return rows


def score_samples(samples_path: str | Path, out_dir: str | Path, *, timeout_s: float = 5.0,
                  workers: int | None = None, progress: bool = True, bootstrap: int = 1000,
                  options: GradingOptions | None = None,
                  seed: int = 0) -> dict[str, Any]:
    """Grade ``samples_path`` into ``out_dir/graded.jsonl`` and ``out_dir/metrics.json``."""
    samples_path, out_dir = Path(samples_path), Path(out_dir)
    rows = load_samples(samples_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    graded = grade_samples(rows, timeout_s=timeout_s, workers=workers, progress=progress, options=options)
    grading_wall_s = time.perf_counter() - started
    write_jsonl(out_dir / rundir.GRADED, graded)

    metrics = compute_metrics(graded, bootstrap=bootstrap, seed=seed)
    metrics_path = out_dir / rundir.METRICS
    _keep_other_sections(metrics, metrics_path)
    provenance = metrics["provenance"]
    provenance["grading"] = grader_provenance(timeout_s, workers, options)
    provenance["grading"]["wall_s"] = round(grading_wall_s, 3)
    provenance.update({
        "samples_file": str(samples_path.resolve()),
        "samples_sha256": hashlib.sha256(samples_path.read_bytes()).hexdigest(),
        "n_samples": len(graded),
        "created": rundir.now_iso(),
        "versions": rundir.library_versions(),
    })
    run_config = _run_config_summary(samples_path.parent)
    if run_config:
        provenance["run_config"] = run_config
    write_json(metrics_path, metrics)
    return metrics


def score_run_dir(run_dir: str | Path, *, timeout_s: float = 5.0, workers: int | None = None,
                  progress: bool = True, bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Score ``RUN_DIR/samples.jsonl`` in place (graded.jsonl + metrics.json next to it)."""
    run_dir = rundir.require_run_dir(run_dir, rundir.SAMPLES)
    return score_samples(run_dir / rundir.SAMPLES, run_dir, timeout_s=timeout_s, workers=workers,
                         progress=progress, bootstrap=bootstrap, seed=seed)


def _keep_other_sections(metrics: dict[str, Any], metrics_path: Path) -> None:
    if not metrics_path.exists():
        return
    try:
        old = read_json(metrics_path)
    except DsdrError:
        return  # an unreadable old file is replaced; nothing in it can be merged
    for name, entry in (old.get("benchmarks") or {}).items() if isinstance(old, dict) else ():
        if name in metrics["benchmarks"] and isinstance(entry, dict):
            for key in PRESERVED_BENCHMARK_KEYS:
                if key in entry:
                    metrics["benchmarks"][name][key] = entry[key]


def _run_config_summary(run_dir: Path) -> dict[str, Any] | None:
    """How the samples were generated (model, backend, protocol, template), when config.json exists."""
    if not (run_dir / rundir.CONFIG).exists():
        return None
    try:
        config = rundir.load_config(run_dir)
    except DsdrError:
        return None
    template = config.get("template")
    summary = {key: config[key] for key in ("kind", "label", "model", "backend", "protocol") if key in config}
    if isinstance(template, dict):
        summary["template"] = {k: template[k] for k in ("name", "chat") if k in template}
    return summary or None
