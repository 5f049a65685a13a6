"""Step 2 of ``dsdr-eval run``: the run directory as it is. A RUN_DIR made with other settings is refused
before any engine starts (``check_resume_config``; ``--force-config`` continues into it and records
what changed); samples.jsonl is read once (``open_samples``, cutting a partial last line a crash left);
a rerun into samples already there gets a ``resumed`` record in config.json (``continuation_record``),
and a run whose samples are all there generates nothing (``Resume.all_generated``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError, warn
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.rundir.samples import SampleKey, SamplesFile
from dsdr_eval.run.plan import RunPlan
from dsdr_eval.run.shard import check_shard_dir, finished_keys


@dataclass(frozen=True)
class Resume:
    """What the run directory already holds for this plan. ``old_config``: its config.json (None for a fresh
    directory); ``samples``: samples.jsonl, opened once (generation appends to it, scoring reads it);
    ``continuation``: the ``resumed`` record of this rerun (None when nothing was generated before)."""

    old_config: dict[str, Any] | None
    samples: SamplesFile
    expected: set[SampleKey]
    continuation: dict[str, Any] | None

    @property
    def all_generated(self) -> bool:
        """A rerun whose every planned sample is in samples.jsonl: re-grade and re-score, start no engine."""
        return self.continuation is not None and self.expected <= self.samples.keys


def open_resume(plan: RunPlan, *, force: bool, allow_mixed_models: bool) -> Resume:
    """Refuse a mismatched RUN_DIR (before paying for an engine start), create it, read its samples."""
    old_config = check_resume_config(plan.out, plan.config, force=force, allow_mixed_models=allow_mixed_models)
    check_shard_dir(plan.out, old_config, plan.shard)
    plan.out.mkdir(parents=True, exist_ok=True)
    samples = open_samples(rundir.run_path(plan.out, rundir.SAMPLES))
    expected = plan.expected
    if plan.shard is not None:  # a shard's units are cut by its engine; a finished one's are in config.json
        expected = finished_keys(old_config, samples.keys & plan.expected) or plan.expected
    return Resume(old_config, samples, expected,
                  _continuation(plan.out, old_config, plan.config, samples, plan.expected))


def _continuation(out: Path, old_config: dict[str, Any] | None, config: dict[str, Any], samples: SamplesFile,
                  expected: set[SampleKey]) -> dict[str, Any] | None:
    """The ``resumed`` record of a rerun into a RUN_DIR that holds samples (None for a fresh run)."""
    done = samples.keys
    if old_config is None or not done:
        if done:  # --force-config into samples of unknown settings (no config.json)
            config["adopted_samples"] = {"n": len(done), "lines": [1, samples.n_lines],
                                         "note": "already in samples.jsonl, of unknown settings (--force-config)"}
        return None  # nothing generated yet: this run's settings are the run's
    continuation = continuation_record(old_config, config, first_line=samples.n_lines + 1,
                                       n_outside_plan=len(done - expected))
    if "forced" in continuation:
        warn(f"--force-config: {out} was made with another {', '.join(continuation['forced']['changed'])}; "
             "config.json keeps its first settings and records this continuation, with what changed and "
             f"the samples.jsonl lines it writes (from line {continuation['first_line']}), under 'resumed'")
    return continuation


def record_forced_without_generation(out: Path, old_config: dict[str, Any], continuation: dict[str, Any]) -> None:
    """A forced rerun that has nothing to generate (e.g. a smaller --n) is recorded, and says so."""
    continuation.update(backend=None, n_generated=0)
    add_continuation(old_config, continuation)
    rundir.save_config(out, old_config)
    outside = continuation["forced"]["n_samples_outside_settings"]
    if outside:
        warn(f"{outside} samples in {rundir.run_path(out, rundir.SAMPLES)} lie outside the forced settings "
             "(e.g. sample_idx beyond the new n); they are kept and scored with the others, so the metrics "
             "are those of the samples in the file (recorded under 'resumed' in config.json)")


def open_samples(samples_path: Path) -> SamplesFile:
    """samples.jsonl of a run being resumed (cutting a partial last line left by a crash first),
    validated; an absent file is an empty one. Errors name ``FILE:LINE:FIELD``."""
    return SamplesFile.open(samples_path, repair=True, missing_ok=True)


def check_resume_config(run_dir: Path, new_config: dict[str, Any], *, force: bool,
                        allow_mixed_models: bool = False) -> dict[str, Any] | None:
    """Refuse to mix runs: a RUN_DIR with a different model/protocol/template/benchmarks is an error
    unless ``force`` (``--force-config``); a different model whose samples would join the run's
    needs ``allow_mixed_models`` too. Returns the existing config (None for a fresh dir)."""
    config_path = rundir.run_path(run_dir, rundir.CONFIG)
    samples_path = rundir.run_path(run_dir, rundir.SAMPLES)
    if not config_path.exists():
        if samples_path.exists() and samples_path.stat().st_size > 0 and not force:
            raise DsdrError(f"{run_dir}: holds samples.jsonl but no config.json; refusing to add samples of "
                            "unknown settings (use another --out, or --force-config)")
        return None
    old = rundir.load_config(run_dir)
    if old.get("kind") != "eval" and not force:
        raise DsdrError(f"{config_path}: kind={old.get('kind')!r}, not an eval run directory")
    changes = rundir.identity_changes(old, new_config)
    differing = list(changes)
    if differing and not force:
        details = "; ".join(f"{k}: was {c['was']!r}, now {c['now']!r}" for k, c in changes.items())
        raise DsdrError(f"{config_path}: this run directory was made with a different "
                        f"{', '.join(differing)} ({details[:1500]}). Use another --out, or --force-config "
                        "to continue into it anyway" + (" (with --allow-mixed-models for a different model)"
                                                        if "model" in differing else ""))
    has_samples = samples_path.exists() and samples_path.stat().st_size > 0
    if "model" in differing and has_samples and not allow_mixed_models:
        raise DsdrError(f"{config_path}: this run directory holds samples of model {changes['model']['was']!r}; "
                        f"--force-config would add samples of {changes['model']['now']!r} to the same run. Use another "
                        "--out, or add --allow-mixed-models (config.json then records which samples came from "
                        "which model)")
    return old


def continuation_record(old_config: dict[str, Any], new_config: dict[str, Any], *, first_line: int,
                        n_outside_plan: int) -> dict[str, Any]:
    """The ``resumed`` entry of one continuation of a run (config.json keeps the first run's settings).

    ``first_line``: the samples.jsonl line this continuation's first sample goes to (the lines before
    it came from earlier entries). A continuation forced into different settings (``--force-config``)
    records under ``forced`` what changed (``was``/``now`` per identity field), its full settings and
    how many samples already in the file lie outside them (they are kept and scored)."""
    record: dict[str, Any] = {"at": rundir.now_iso(), "command": new_config.get("command"),
                              "backend": new_config.get("backend"), "first_line": first_line,
                              "n_generated": None}
    changed = rundir.identity_changes(old_config, new_config)
    if changed:
        record["forced"] = {
            "changed": changed,
            "settings": {k: new_config.get(k) for k in ("model", "protocol", "template", "benchmarks", "subset")},
            "n_samples_outside_settings": n_outside_plan,
        }
    return record


def add_continuation(config: dict[str, Any], record: dict[str, Any]) -> None:
    """Append ``record`` to config["resumed"]; a forced one also lists its fields under "mixed_settings"
    (so a reader knows the top-level settings do not describe every sample)."""
    config.setdefault("resumed", []).append(record)
    if "forced" in record:
        config["mixed_settings"] = sorted(set(config.get("mixed_settings") or ()) | set(record["forced"]["changed"]))

