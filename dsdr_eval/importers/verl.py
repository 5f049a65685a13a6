"""verl validation dumps: ``<trainer.validation_data_dir>/<global_step>.jsonl`` (``RayPPOTrainer._dump_generations``).

One line per completion: ``input`` (the decoded prompt, chat template included), ``output``,
``gts`` (the ground truth), ``score`` (the reward), ``step``, and every per-sample entry of the
reward's extra info (``reward``, ``acc``, ``pred``...). The ``val_kwargs.n`` completions of a
prompt are written next to each other; a problem is one distinct ``input`` (its id: the order of
first appearance, the validation set's order). The dump records no sampling setting.

PATH may be the directory: the largest step is imported unless ``step`` is given.
``source_correct`` is ``acc`` when the reward records it, else ``score`` when every score is 0 or 1.
Answer extraction: verl's default reward for math data (``math_dapo`` / ``math``: the last
``\\boxed{}``), ``gsm8k`` for GSM8K prompts (verl's gsm8k data asks for the answer after "####").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.importers.source import (GoldError, SourceRecord, SourceRun, as_label, gold_text, numbered_rows,
                                        read_source, require)
from dsdr_eval.rundir.json_values import json_type

TOOL = "verl"
STEP_FILE = re.compile(r"^[0-9]+\.jsonl$")  # ASCII digits only: '².jsonl' is not a step


def step_file(path: Path, step: int | None) -> Path:
    """The dump of ``step`` (default: the largest) when ``path`` is the validation directory."""
    if not path.is_dir():
        return path
    steps = {int(p.name[:-len(".jsonl")]): p for p in path.iterdir() if STEP_FILE.match(p.name) and p.is_file()}
    if not steps:
        raise DsdrError(f"{path}: no <step>.jsonl validation dumps in this directory")
    chosen = max(steps) if step is None else step
    if chosen not in steps:
        raise DsdrError(f"{path}: no dump for step {chosen} (steps: {', '.join(map(str, sorted(steps)))})")
    return steps[chosen]


def read(path: Path, *, step: int | None = None, **_: Any) -> SourceRun:
    path = step_file(path, step)
    raw, sha256 = read_source(path)
    rows = list(numbered_rows(raw, path, ("gts",)))
    ids: dict[str, int] = {}
    use_score = all(isinstance(r.get("score"), (int, float)) and r.get("score") in (0, 1) for _, r in rows)
    steps: set[int] = set()
    records = []
    for lineno, row in rows:
        where = f"{path}:{lineno}"
        prompt = require(row, "input", where, str, "a string")
        output = require(row, "output", where, str, "a string")
        require(row, "score", where, (int, float), "a number")
        if row.get("step") is not None:
            steps.add(require(row, "step", where, int, "an integer (the global step)"))
        label = (as_label(row["acc"], where, "acc") if row.get("acc") is not None
                 else as_label(row["score"], where, "score") if use_score else None)
        pred = row.get("pred")
        problem_id = ids.setdefault(prompt, len(ids))
        try:
            gold, error = _gold(row, where), None
        except GoldError as exc:
            gold, error = None, str(exc)
        records.append(SourceRecord(lineno, problem_id, gold, None, prompt, (output,),
                                    () if label is None else (label,), (pred if isinstance(pred, str) else None,),
                                    error))
    if not rows:
        raise DsdrError(f"{path}: no samples")
    has_acc = any(row.get("acc") is not None for _, row in rows)
    notes = ["the dump records no sampling setting (actor_rollout_ref.rollout.val_kwargs): all unknown"]
    notes.append("source_correct from 'acc'" if has_acc else "source_correct from 'score' (every score is 0 or 1)"
                 if use_score else "no 0/1 correctness label in the dump: no source_correct")
    details = {"step": next(iter(steps)) if len(steps) == 1 else sorted(steps)}
    gsm8k = rows and all("####" in row["input"] for _, row in rows)
    extraction = (("gsm8k", "verl gsm8k data: the answer after '####'") if gsm8k
                  else ("boxed", "verl math reward: the last \\boxed{}"))
    return SourceRun(TOOL, None, None, records, dict.fromkeys(("temperature", "top_p", "max_tokens", "seed")),
                     details, notes, sha256, path,
                     verdict_field="acc" if has_acc else "score" if use_score else None, extraction=extraction)


def _gold(row: dict[str, Any], where: str) -> str:
    """``gts``: one answer (a one-item list is that item), as exact text."""
    gold = row.get("gts")
    if gold is None:
        raise GoldError(f"{where}:gts: missing gold answer 'gts' (the ground truth; verl dumps written before it "
                        "was added cannot be graded)")
    if isinstance(gold, list):
        if len(gold) != 1:
            raise GoldError(f"{where}:gts: a list of {len(gold)} answers; one gold answer per problem is needed")
        return gold_text(gold[0], where, "gts.0")
    if isinstance(gold, dict):
        raise GoldError(f"{where}:gts: must be a string or a number (got {json_type(gold)})")
    return gold_text(gold, where, "gts")
