"""Plain JSONL with a field mapping: any file with one object per line.

``FieldMap`` names the fields (dotted paths reach nested objects: ``doc.answer``): the problem id,
the gold answer and the completion are required; the completion field may hold one string or a
list of them; the optional correctness field holds true/false (or 0/1), or a list of them, one per
completion. Lines with the same id are completions of one problem (sample_idx in file order).
The reasoning and finish-reason fields hold one value per completion: a string (or null) for a
single completion, a list aligned with a list of completions (null items: not recorded). Without
``reasoning``, a line's ``reasoning`` field is read, else its ``reasoning_content`` (the name
OpenAI-compatible servers give a thought: vLLM, DeepSeek, SGLang); without ``finish_reason``, its
``finish_reason`` field. A plain file records no tool version and no sampling setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.importers.source import (SourceRecord, SourceRun, checked_gold, get_path, labels, numbered_rows,
                                        per_completion, read_source, require, string_list)

TOOL = "jsonl"


@dataclass(frozen=True)
class FieldMap:
    """Which field of a line holds what (dotted paths)."""

    id: str = "id"
    gold: str = "answer"
    completion: str = "completion"
    problem: str | None = "problem"
    prompt: str | None = None
    correct: str | None = None
    reasoning: str | None = None  # None: "reasoning", else "reasoning_content", where a line has one
    finish_reason: str | None = None  # None: "finish_reason" where a line has one


REASONING_FIELDS = ("reasoning", "reasoning_content")  # read in this order when no reasoning field is named


def read(path: Path, *, fields: FieldMap | None = None, **_: Any) -> SourceRun:
    fields = fields or FieldMap()
    raw, sha256 = read_source(path)
    records = [_record(row, lineno, f"{path}:{lineno}", fields)
               for lineno, row in numbered_rows(raw, path, (fields.gold.split(".")[0],))]
    if not records:
        raise DsdrError(f"{path}: no samples")
    sampling = dict.fromkeys(("temperature", "top_p", "max_tokens", "seed"))
    details = {"fields": {k: v for k, v in vars(fields).items() if v is not None}}
    notes = ["a plain JSONL records no sampling setting: all unknown"]
    for what, name in (("reasoning", fields.reasoning or "reasoning / reasoning_content"),
                       ("finish_reasons", fields.finish_reason or "finish_reason")):
        n = sum(value is not None for record in records for value in getattr(record, what))
        if n:
            notes.append(f"{what.rstrip('s').replace('_', ' ')} of {n} completions from {name}")
    return SourceRun(TOOL, None, None, records, sampling, details, notes, sha256, verdict_field=fields.correct)


def _record(row: dict[str, Any], lineno: int, where: str, fields: FieldMap) -> SourceRecord:
    problem_id = require(row, fields.id, where, (str, int), "a string or an integer")
    value = require(row, fields.completion, where, (str, list), "a string or a list of strings")
    gold, _, error = checked_gold(row, where, (fields.gold,))
    completions = (value,) if isinstance(value, str) else string_list(value, where, fields.completion)
    correct: tuple[bool | None, ...] = ()
    if fields.correct is not None and get_path(row, fields.correct) is not None:
        correct = labels(get_path(row, fields.correct), len(completions), where, fields.correct)
    texts = {}
    for role in ("problem", "prompt"):
        name = getattr(fields, role)
        text = get_path(row, name) if name else None
        if text is not None and not isinstance(text, str):
            raise DsdrError(f"{where}:{name}: must be a string (got {type(text).__name__})")
        texts[role] = text
    n = len(completions)
    reasoning_field = fields.reasoning or next((name for name in REASONING_FIELDS if get_path(row, name) is not None),
                                               REASONING_FIELDS[0])
    reasoning = per_completion(get_path(row, reasoning_field), n, where, reasoning_field, str, "a string")
    finish_field = fields.finish_reason or "finish_reason"
    finish = per_completion(get_path(row, finish_field), n, where, finish_field, str, "a string")
    return SourceRecord(lineno, problem_id, gold, texts["problem"], texts["prompt"], completions, correct, (), error,
                        reasoning=reasoning, finish_reasons=finish)
