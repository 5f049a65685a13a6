"""Qwen2.5-Math ``evaluation/math_eval.py`` outputs: ``<data_name>/<split>_<prompt_type>_<num_test_sample>
_seed<seed>_t<temperature>_s<start>_e<end>.jsonl``.

One line per problem: ``idx``, ``question``, ``gt`` (the gold answer), ``gt_cot``, ``code`` (the
``n_sampling`` completions), ``pred`` (the answer extracted from each), ``report`` and ``score``
(the harness's verdict per completion, written by ``evaluate.py``: ToRA-style files written
without it have no verdict), plus data-set fields (``answer``, ``level``, ``type``, ``answer_type``...).
An empty or missing ``gt`` falls back to the data set's ``answer`` field (math_eval.py copies the
data set row into the line; ``parse_ground_truth`` makes ``gt`` from it).
The file records neither top-p nor the token limit unless a fork writes them into its name; the
settings are read from the name's ``_<key><value>`` tokens wherever they stand (forks insert
``top_k8``, ``enable_thinkingFalse``, ``top_p0.95``, ``n8`` ...), the data set is the directory.
Answer extraction: math_eval.py's ``extract_answer`` (boxed, then "the answer is", then the last
number), the ``flexible`` profile. For a tool-integrated prompt type (ToRA's ``tora``, ``pal``,
``*tir*``, ``tool-integrated``...) ToRA's ``extract_answer`` reads the last program output
(```` ```output ````) before falling back to the last number: the ``tool-output`` profile (ToRA-70B's
real GSM8K file: 3 of 1319 completions end in prose whose last number is not the program's output).
``program_only`` prompt types read the program output alone: the ``program-output`` profile.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dsdr_eval.importers.source import (SourceRecord, SourceRun, answers, checked_gold, labels, numbered_rows,
                                        read_source, require, string_list)

TOOL = "qwen-math"
EXTRACTION = ("flexible", "math_eval.py extract_answer: boxed, then 'the answer is', then the last number")
TOOL_EXTRACTION = ("tool-output", "tool-integrated prompt type: extract_answer reads boxed, then 'the answer is', "
                   "then the last ```output block, then the last number")
PROGRAM_EXTRACTION = ("program-output", "program_only prompt type: run_execute reads the last ```output block only")
GOLD_FIELDS = ("gt", "answer")  # the tool's gold, then the data set's answer it was parsed from
# settings token of the file name -> (key in config, type); a token is "_<name><value>" anywhere in the name
_TOKENS = {"seed": ("seed", int), "temperature": ("temperature", float), "temp": ("temperature", float),
           "t": ("temperature", float), "top_p": ("top_p", float), "top_k": ("top_k", int),
           "max_tokens_per_call": ("max_tokens", int), "max_tokens": ("max_tokens", int),
           "n_sampling": ("n_sampling", int), "n": ("n_sampling", int), "s": ("start", int), "e": ("end", int),
           "enable_thinking": ("enable_thinking", bool)}
_TOKEN = re.compile(r"(?:^|_)(?P<key>" + "|".join(sorted(map(re.escape, _TOKENS), key=len, reverse=True)) +
                    r")(?P<value>True|False|-?\d+(?:\.\d+)?)(?=_|$)")
# prompt types whose completions run code: math_eval.py reads the program's output before the last number
_TOOL_PROMPT = re.compile(r"(?:^|[-_])(?:tora|pal|pot|tir|tool|program)", re.I)
_HEAD = re.compile(r"^(?P<split>[^_]+)_(?P<prompt_type>.+?)_(?P<num>-?\d+)(?=_)")


def file_settings(name: str) -> dict[str, Any]:
    """The settings a math_eval.py output name records (``split``, ``prompt_type``, ``num_test_sample``
    and every ``_<key><value>`` token of ``_TOKENS``), each wherever it stands; {} for another name."""
    stem = name[:-len(".jsonl")] if name.endswith(".jsonl") else name
    head = _HEAD.match(stem)
    rest = stem[head.end():] if head else stem
    found: dict[str, Any] = {}
    for match in _TOKEN.finditer(rest):
        key, kind = _TOKENS[match["key"]]
        value = match["value"]
        if kind is bool:
            if value in ("True", "False"):
                found.setdefault(key, value == "True")
        elif value not in ("True", "False") and (kind is float or "." not in value):
            found.setdefault(key, kind(value))
    if head and found:
        found = {"split": head["split"], "prompt_type": head["prompt_type"], "num_test_sample": int(head["num"]),
                 **found}
    return found


def read(path: Path, **_: Any) -> SourceRun:
    raw, sha256 = read_source(path)
    records, fallback, has_score = [], 0, False
    for lineno, row in numbered_rows(raw, path, GOLD_FIELDS):
        record, field = _record(row, lineno, f"{path}:{lineno}")
        records.append(record)
        fallback += field not in (None, GOLD_FIELDS[0])
        has_score = has_score or row.get("score") is not None
    settings = file_settings(path.name)
    notes = []
    sampling: dict[str, Any] = {name: settings.get(name) for name in ("temperature", "top_p", "max_tokens", "seed")}
    unknown = [name for name, value in sampling.items() if value is None]
    if "seed" not in settings:
        notes.append("file name has no math_eval.py settings tokens (<split>_<prompt_type>_<n>_seed<S>_t<T>_s<a>"
                     "_e<b>.jsonl): " + ", ".join(unknown) + " unknown")
    elif unknown:
        notes.append(f"{', '.join(unknown)} not in the file name (math_eval.py does not write them): unknown")
    if fallback:
        notes.append(f"gold from the data set's 'answer' field where 'gt' is empty or missing ({fallback} lines)")
    details = {k: v for k, v in settings.items() if k not in sampling}
    prompt_type = settings.get("prompt_type")
    benchmark = path.resolve().parent.name or None  # math_eval.py writes into <output_dir>/<data_name>/
    return SourceRun(TOOL, None, benchmark, records, sampling, details, notes, sha256,
                     verdict_field="score" if has_score else None, extraction=extraction_for(prompt_type))


def extraction_for(prompt_type: Any) -> tuple[str, str]:
    """(profile, why) of a math_eval.py prompt type: run_execute's branch for it."""
    if isinstance(prompt_type, str) and "program_only" in prompt_type:
        return PROGRAM_EXTRACTION
    if isinstance(prompt_type, str) and _TOOL_PROMPT.search(prompt_type):
        return TOOL_EXTRACTION
    return EXTRACTION


def _record(row: dict[str, Any], lineno: int, where: str) -> tuple[SourceRecord, str | None]:
    idx = require(row, "idx", where, (int, str), "an integer")
    question = require(row, "question", where, str, "a string")
    completions = string_list(require(row, "code", where, list, "a list of completions"), where, "code")
    gold, field, error = checked_gold(row, where, GOLD_FIELDS)
    n = len(completions)
    correct = labels(row["score"], n, where, "score") if row.get("score") is not None else ()
    extracted = answers(row.get("pred"), n) if row.get("pred") is not None else ()
    return SourceRecord(lineno, idx, gold, question, None, completions, correct, extracted, error), field
