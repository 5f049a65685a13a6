"""Score a samples file: validate -> grade (grading.py) -> metrics (metrics.py) -> write files.

``score_run_dir(RUN_DIR)`` reads ``RUN_DIR/samples.jsonl`` and writes ``graded.jsonl`` and
``metrics.json`` next to it; ``score_samples(path, out_dir)`` does the same for any samples file.
``metrics.json`` is written through ``rundir.update_metrics`` (its "score" section): the
``diversity`` / ``judge`` keys of each benchmark are kept, so re-scoring never loses what
``dsdr-eval diversity`` / ``dsdr-eval judge`` computed.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Callable

from dsdr_eval.answer_norm import GradingOptions
from dsdr_eval import rundir
from dsdr_eval.errors import DsdrError, warn
from dsdr_eval.grading import grade_samples, grader_provenance
from dsdr_eval.jsonl import field_label, iter_jsonl_numbered, write_jsonl
from dsdr_eval.metrics import DEFAULT_BENCHMARK, compute_metrics


def load_samples(path: str | Path, *, on_warning: Callable[[str], None] = warn) -> list[dict[str, Any]]:
    """Read and validate a whole samples JSONL before any grading; errors name ``file:line:field``.

    Each record is checked by ``rundir.validate_sample`` (types, ranges, lone surrogates, exact
    number text of golds). A partial last line (a generation run killed mid-append) is skipped with
    a warning, like the run loop does. ``sample_idx`` defaults to the order of appearance within
    (benchmark, phase, problem_id); ``phase`` to "sampling". One warning line per field whose lone
    surrogates were replaced (with the first line and how many lines)."""
    path = Path(path)
    if not path.is_file():
        raise DsdrError(f"{path}: samples file not found")
    rows: list[dict[str, Any]] = []
    keys: dict[tuple, int] = {}
    golds: dict[tuple[str, str], tuple[str, int]] = {}
    next_idx: dict[tuple, int] = {}
    replaced: dict[str, list[int]] = {}
    for lineno, raw in iter_jsonl_numbered(path, tolerate_truncated_tail=True, on_warning=on_warning,
                                           exact_number_fields=("gold",)):
        where = f"{path}:{lineno}"
        row, replaced_fields = rundir.validate_sample(raw, where)
        for name in replaced_fields:
            replaced.setdefault(name, []).append(lineno)
        group = (row.get("benchmark") or DEFAULT_BENCHMARK, row["phase"], row["problem_id"])
        if row.get("sample_idx") is None:
            row["sample_idx"] = next_idx.get(group, 0)
        idx = row["sample_idx"]
        next_idx[group] = max(next_idx.get(group, 0), idx + 1)
        key = (*group, idx)
        if key in keys:
            raise DsdrError(f"{where}:sample_idx: duplicate sample {key} (first on line {keys[key]})")
        keys[key] = lineno
        problem = (group[0], row["problem_id"])
        if problem in golds and golds[problem][0] != row["gold"]:
            raise DsdrError(f"{where}:gold: {row['gold']!r} differs from {golds[problem][0]!r} "
                            f"given for the same problem on line {golds[problem][1]}")
        golds.setdefault(problem, (row["gold"], lineno))
        rows.append(row)
    if not rows:
        raise DsdrError(f"{path}: no samples")
    for name, lines in replaced.items():
        more = f" (and on {len(lines) - 1} more lines)" if len(lines) > 1 else ""
        on_warning(f"{path}:{lines[0]}:{field_label(name)}: lone surrogate(s) (not valid Unicode) replaced "
                   f"by U+FFFD{more}")
    return rows


def score_samples(samples_path: str | Path, out_dir: str | Path, *, timeout_s: float = 5.0,
                  workers: int | None = None, progress: bool = True, bootstrap: int = 1000,
                  options: GradingOptions | None = None,
                  seed: int = 0) -> dict[str, Any]:
    """Grade ``samples_path`` into ``out_dir/graded.jsonl`` and ``out_dir/metrics.json``.

    The whole file is validated before any grading; both outputs are written (atomically) only
    after grading and metrics succeeded, so a failure leaves the previous ones untouched."""
    samples_path, out_dir = Path(samples_path), Path(out_dir)
    rows = load_samples(samples_path)
    started = time.perf_counter()
    graded = grade_samples(rows, timeout_s=timeout_s, workers=workers, progress=progress, options=options)
    grading_wall_s = time.perf_counter() - started

    metrics = compute_metrics(graded, bootstrap=bootstrap, seed=seed)
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
    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(out_dir / rundir.GRADED, graded)
    # the scores' section of metrics.json; diversity / judge blocks already there are kept
    return rundir.update_metrics(out_dir, rundir.SCORE_SECTION, metrics["benchmarks"], summary=metrics)


def score_run_dir(run_dir: str | Path, *, timeout_s: float = 5.0, workers: int | None = None,
                  progress: bool = True, bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Score ``RUN_DIR/samples.jsonl`` in place (graded.jsonl + metrics.json next to it)."""
    run_dir = rundir.require_run_dir(run_dir, rundir.SAMPLES)
    return score_samples(run_dir / rundir.SAMPLES, run_dir, timeout_s=timeout_s, workers=workers,
                         progress=progress, bootstrap=bootstrap, seed=seed)


def _run_config_summary(run_dir: Path) -> dict[str, Any] | None:
    """How the samples were generated (model, backend, protocol, template), when config.json exists."""
    if not (run_dir / rundir.CONFIG).exists():
        return None
    try:
        config = rundir.load_config(run_dir)
    except DsdrError:
        return None
    template = config.get("template")
    summary = {key: config[key] for key in ("kind", "label", "model", "backend", "protocol", "mixed_settings")
               if key in config}
    if isinstance(template, dict):
        summary["template"] = {k: template[k] for k in ("name", "chat") if k in template}
    return summary or None
