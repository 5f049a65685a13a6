"""Plain JSONL with a field mapping: any file with one object per line.

``FieldMap`` names the fields (dotted paths reach nested objects: ``doc.answer``): the problem id,
the gold answer and the completion are required; the completion field may hold one string or a
list of them; the optional correctness field holds true/false (or 0/1), or a list of them, one per
completion. Lines with the same id are completions of one problem (sample_idx in file order).
A plain file records no tool version and no sampling setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.importers.source import (SourceRecord, SourceRun, checked_gold, get_path, labels, numbered_rows,
                                        read_source, require, string_list)

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


def read(path: Path, *, fields: FieldMap | None = None, **_: Any) -> SourceRun:
    fields = fields or FieldMap()
    raw, sha256 = read_source(path)
    records = [_record(row, lineno, f"{path}:{lineno}", fields)
               for lineno, row in numbered_rows(raw, path, (fields.gold.split(".")[0],))]
    if not records:
        raise DsdrError(f"{path}: no samples")
    sampling = dict.fromkeys(("temperature", "top_p", "max_tokens", "seed"))
    details = {"fields": {k: v for k, v in vars(fields).items() if v is not None}}
    return SourceRun(TOOL, None, None, records, sampling, details,
                     ["a plain JSONL records no sampling setting: all unknown"], sha256,
                     verdict_field=fields.correct)


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
    return SourceRecord(lineno, problem_id, gold, texts["problem"], texts["prompt"], completions, correct, (), error)
