"""verl validation dumps: ``<trainer.validation_data_dir>/<global_step>.jsonl`` (``RayPPOTrainer._dump_generations``).

One line per completion: ``input`` (the decoded prompt, chat template included), ``output``,
``gts`` (the ground truth), ``score`` (the reward), ``step``, and every per-sample entry of the
reward's extra info (``reward``, ``acc``, ``pred``...). The ``val_kwargs.n`` completions of a
prompt are written next to each other; a problem is one distinct ``input`` (its id: the order of
first appearance, the validation set's order). The dump records no sampling setting.

PATH may be the directory: the largest step is imported unless ``step`` is given.
``source_correct`` is ``acc`` when the reward records it, else ``score`` when every score is 0 or 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.importers.source import SourceRecord, SourceRun, as_label, numbered_rows, read_source, require
from dsdr_eval.jsonl import json_type

TOOL = "verl"


def step_file(path: Path, step: int | None) -> Path:
    """The dump of ``step`` (default: the largest) when ``path`` is the validation directory."""
    if not path.is_dir():
        return path
    steps = {int(p.stem): p for p in path.glob("*.jsonl") if p.stem.isdigit()}
    if not steps:
        raise DsdrError(f"{path}: no <step>.jsonl validation dumps in this directory")
    chosen = max(steps) if step is None else step
    if chosen not in steps:
        raise DsdrError(f"{path}: no dump for step {chosen} (steps: {', '.join(map(str, sorted(steps)))})")
    return steps[chosen]


def read(path: Path, *, step: int | None = None, **_: Any) -> SourceRun:
    path = step_file(path, step)
    raw, sha256 = read_source(path)
    rows = list(numbered_rows(raw, path))
    ids: dict[str, int] = {}
    use_score = all(isinstance(r.get("score"), (int, float)) and r.get("score") in (0, 1) for _, r in rows)
    steps: set[Any] = set()
    records = []
    for lineno, row in rows:
        where = f"{path}:{lineno}"
        prompt = require(row, "input", where, str, "a string")
        output = require(row, "output", where, str, "a string")
        require(row, "score", where, (int, float), "a number")
        steps.add(row.get("step"))
        label = (as_label(row["acc"], where, "acc") if row.get("acc") is not None
                 else as_label(row["score"], where, "score") if use_score else None)
        pred = row.get("pred")
        records.append(SourceRecord(lineno, ids.setdefault(prompt, len(ids)), _gold(row, where), None, prompt,
                                    (output,), () if label is None else (label,),
                                    (pred if isinstance(pred, str) else None,)))
    if not records:
        raise DsdrError(f"{path}: no samples")
    has_acc = any(row.get("acc") is not None for _, row in rows)
    notes = ["the dump records no sampling setting (actor_rollout_ref.rollout.val_kwargs): all unknown"]
    notes.append("source_correct from 'acc'" if has_acc else "source_correct from 'score' (every score is 0 or 1)"
                 if use_score else "no 0/1 correctness label in the dump: no source_correct")
    details = {"step": next(iter(steps)) if len(steps) == 1 else sorted(s for s in steps if isinstance(s, int))}
    return SourceRun(TOOL, None, None, records, dict.fromkeys(("temperature", "top_p", "max_tokens", "seed")),
                     details, notes, sha256, path)


def _gold(row: dict[str, Any], where: str) -> Any:
    """``gts``: one answer (a one-item list is that item)."""
    gold = row.get("gts")
    if gold is None:
        raise DsdrError(f"{where}:gts: missing required field 'gts' (the ground truth; verl dumps written "
                        "before it was added cannot be graded)")
    if isinstance(gold, list):
        if len(gold) != 1:
            raise DsdrError(f"{where}:gts: a list of {len(gold)} answers; one gold answer per problem is needed")
        gold = gold[0]
    if isinstance(gold, bool) or not isinstance(gold, (str, int, float)):
        raise DsdrError(f"{where}:gts: must be a string or a number (got {json_type(gold)})")
    return gold
