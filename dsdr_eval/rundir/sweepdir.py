"""Checkpoint sweeps: the checkpoints of a training run, and SWEEP_DIR/sweep.json (its one writer).

A training run (docs/run_directory.md, "Training run") holds ``checkpoints/step_XXXXXX/`` (HF model dirs) and
``final/``. ``dsdr-eval sweep`` evaluates a selection of them, one evaluation run directory per
checkpoint under SWEEP_DIR, named like the checkpoint (``SWEEP_DIR/step_000010/``; final/ ->
``SWEEP_DIR/final_eval/``),
and records the sweep in ``SWEEP_DIR/sweep.json``::

    {"kind": "sweep", "label", "train_run": {"path", "label", "config"}, "eval": {settings},
     "every", "include_final", "steps": [10, 20, ...],
     "checkpoints": [{"name": "step_000010", "step": 10, "model": PATH, "run_dir": "step_000010",
                      "status": "pending" | "done" | "incomplete" | "error", "message"?}], "created", "updated"}

``eval`` holds the run options that define the numbers (protocol and its overrides, template,
benchmarks, subset); a rerun with other such settings into the same SWEEP_DIR is refused.
No heavy import here (the dashboard reads sweep.json through ``load_sweep``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.checkpoints import FINAL, step_checkpoints
from dsdr_eval.rundir.jsonl import iter_jsonl, read_json, write_json

SWEEP_FILE = "sweep.json"
# final/'s run directory: not "final", which run discovery (dashboard) skips as a model directory
FINAL_RUN_DIR = "final_eval"
STATUSES = ("pending", "done", "incomplete", "error")
# The run options whose change changes the numbers: a SWEEP_DIR keeps one value of each.
IDENTITY_OPTIONS = ("protocol", "n", "temperature", "top_p", "top_k", "min_p", "pass1_temperature", "pass1_top_p",
                    "pass1_top_k", "pass1_min_p", "phases", "chat_template_kwargs",
                    "max_tokens", "seed", "template", "prompt_mode", "benchmarks", "limit", "subset_seed",
                    "no_diversity")


@dataclass(frozen=True)
class Checkpoint:
    name: str  # "step_000010" or "final"
    step: int | None  # the training step (final: the last step of metrics.jsonl, None when unknown)
    model: Path
    run_dir: str = ""  # its run directory under SWEEP_DIR (default: the name)

    @property
    def run_name(self) -> str:
        return self.run_dir or self.name


def _train_config(train_run: Path) -> dict[str, Any]:
    if not train_run.is_dir():
        raise DsdrError(f"{train_run}: not a training run (no such directory)")
    path = train_run / rundir.CONFIG
    if not path.exists():
        raise DsdrError(f"{path}: not a training run (no config.json; `dsdr-train --out` writes one)")
    config = read_json(path)
    if not isinstance(config, dict) or config.get("kind") != "train":
        kind = config.get("kind") if isinstance(config, dict) else None
        raise DsdrError(f"{path}: field 'kind' is {kind!r}, not 'train': not a training run")
    return config


def _last_step(train_run: Path) -> int | None:
    """The last optimizer step logged in metrics.jsonl (the step final/ was saved at)."""
    path = train_run / rundir.TRAIN_METRICS
    if not path.exists():
        return None
    steps = [row.get("step") for row in iter_jsonl(path, tolerate_truncated_tail=True, on_warning=lambda _: None)]
    steps = [s for s in steps if isinstance(s, int) and not isinstance(s, bool)]
    return max(steps) if steps else None


def list_checkpoints(train_run: str | Path, *, every: int = 1, include_final: bool = False) -> list[Checkpoint]:
    """The checkpoints a sweep evaluates, by step: every ``every``-th complete ``step_XXXXXX/`` (an
    HF dir with config.json; the trainer renames a checkpoint into place only once it is whole),
    counted from the first, then ``final/`` when asked for (and present). DsdrError when none."""
    train_run = Path(train_run)
    _train_config(train_run)
    if every < 1:
        raise DsdrError(f"--every {every}: must be a positive integer")
    found = [Checkpoint(path.name, step, path) for step, path in step_checkpoints(train_run)]
    selected = found[::every]
    final = train_run / FINAL
    if include_final and (final / rundir.CONFIG).exists():
        selected.append(Checkpoint(FINAL, _last_step(train_run), final, FINAL_RUN_DIR))
    if not selected:
        what = "no final/ and no" if include_final else "no"
        raise DsdrError(f"{train_run}: {what} complete checkpoints (checkpoints/step_XXXXXX/ with config.json) "
                        "to evaluate" + ("" if include_final else "; --include-final adds final/"))
    return selected


def train_run_record(train_run: Path) -> dict[str, Any]:
    """What sweep.json says of the training run: path as given, label and the trainer's settings."""
    config = _train_config(train_run)
    trainer = config.get("config") if isinstance(config.get("config"), dict) else {}
    keep = ("algo", "adv_estimator", "policy_loss", "model", "lr", "group_size", "max_steps", "seed")
    label = config.get("label") or trainer.get("label") or train_run.resolve().name
    return {"path": str(train_run), "label": str(label), "algo": config.get("algo", trainer.get("algo")),
            "config": {k: trainer[k] for k in keep if k in trainer}}


def load_sweep(sweep_dir: str | Path) -> dict[str, Any]:
    """SWEEP_DIR/sweep.json, checked: DsdrError naming the file and field when malformed."""
    path = Path(sweep_dir) / SWEEP_FILE
    record = read_json(path)
    if not isinstance(record, dict) or record.get("kind") != "sweep":
        raise DsdrError(f"{path}: field 'kind' must be 'sweep'")
    checkpoints = record.get("checkpoints")
    if not isinstance(checkpoints, list):
        raise DsdrError(f"{path}: field 'checkpoints' must be a list")
    for index, entry in enumerate(checkpoints):
        where = f"{path}: checkpoints[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("run_dir"), str) \
                or "/" in entry["run_dir"] or entry["run_dir"] in ("", ".", ".."):
            raise DsdrError(f"{where}.run_dir: must be the name of a directory inside the sweep")
        for key in ("name", "model"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise DsdrError(f"{where}.{key}: missing or not a non-empty string")
        if "step" not in entry:
            raise DsdrError(f"{where}.step: missing (an integer, or null when unknown)")
        step = entry.get("step")
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise DsdrError(f"{where}.step: must be an integer or null")
        if "message" in entry and not isinstance(entry["message"], (str, type(None))):
            raise DsdrError(f"{where}.message: must be a string")
        if entry.get("status") not in STATUSES:
            raise DsdrError(f"{where}.status: must be one of {', '.join(STATUSES)}")
    if not isinstance(record.get("eval"), dict):
        raise DsdrError(f"{path}: field 'eval' must be an object")
    for key, kinds, what in (("label", (str,), "a string"), ("every", (int,), "an integer"),
                             ("include_final", (bool,), "true or false"), ("train_run", (dict,), "an object")):
        value = record.get(key)
        if value is not None and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
            raise DsdrError(f"{path}: field '{key}' must be {what}")
    return record


def check_settings(record: dict[str, Any], settings: dict[str, Any], sweep_dir: Path) -> None:
    """Refuse a rerun whose evaluation settings differ from the sweep's (its numbers would mix)."""
    old = record["eval"]
    changed = [k for k in IDENTITY_OPTIONS if k in old and old[k] != settings.get(k)]
    if changed:
        detail = "; ".join(f"{k}: {old[k]!r} -> {settings.get(k)!r}" for k in changed)
        raise DsdrError(f"{sweep_dir / SWEEP_FILE}: this sweep was made with other evaluation settings ({detail}); "
                        "use another --out, or the sweep's own settings")


def new_record(train_run: Path, settings: dict[str, Any], *, label: str | None, every: int, include_final: bool,
               command: list[str]) -> dict[str, Any]:
    train = train_run_record(train_run)
    return {"kind": "sweep", "label": label or train["label"], "train_run": train, "eval": settings,
            "every": every, "include_final": include_final, "command": command, "steps": [],
            "checkpoints": [], "created": rundir.now_iso()}


def merge_checkpoints(record: dict[str, Any], checkpoints: list[Checkpoint]) -> None:
    """Add the checkpoints not yet in the record (a training run that went on, a smaller --every)."""
    known = {entry["run_dir"] for entry in record["checkpoints"]}
    for ckpt in checkpoints:
        if ckpt.run_name not in known:
            record["checkpoints"].append({"name": ckpt.name, "step": ckpt.step, "model": str(ckpt.model),
                                          "run_dir": ckpt.run_name, "status": "pending"})
    record["checkpoints"].sort(key=lambda e: (e["step"] is None, e["step"] or 0, e["name"] == FINAL))
    record["steps"] = [e["step"] for e in record["checkpoints"]]


def is_done(record: dict[str, Any], sweep_dir: Path, name: str) -> bool:
    """Finished: sweep.json says so and its run directory has its metrics.json."""
    entry = next((e for e in record["checkpoints"] if e["run_dir"] == name), None)
    return entry is not None and entry["status"] == "done" and (sweep_dir / name / rundir.METRICS).exists()


def set_status(record: dict[str, Any], name: str, status: str, message: str | None = None) -> None:
    for entry in record["checkpoints"]:
        if entry["run_dir"] == name:
            entry["status"] = status
            entry.pop("message", None)
            if message:
                entry["message"] = message


def save_sweep(sweep_dir: Path, record: dict[str, Any]) -> Path:
    record["updated"] = rundir.now_iso()
    path = sweep_dir / SWEEP_FILE
    write_json(path, record)
    return path
