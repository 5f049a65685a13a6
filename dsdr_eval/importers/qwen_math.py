"""Qwen2.5-Math ``evaluation/math_eval.py`` outputs: ``<data_name>/<split>_<prompt_type>_<num_test_sample>
_seed<seed>_t<temperature>_s<start>_e<end>.jsonl``.

One line per problem: ``idx``, ``question``, ``gt`` (the gold answer), ``gt_cot``, ``code`` (the
``n_sampling`` completions), ``pred`` (the answer extracted from each), ``report`` and ``score``
(the harness's verdict per completion), plus data-set fields (``level``, ``type``, ``answer_type``...).
The file records neither top-p nor the token limit (command-line arguments that are not written);
seed and temperature are in its name, the data set is the directory it is in.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dsdr_eval.importers.source import (SourceRecord, SourceRun, answers, labels, numbered_rows, read_source,
                                        require, string_list)

TOOL = "qwen-math"
_FILE_NAME = re.compile(r"^(?P<split>[^_]+)_(?P<prompt_type>.+)_(?P<num>-?\d+)_seed(?P<seed>-?\d+)"
                        r"_t(?P<temperature>\d+(?:\.\d+)?)_s(?P<start>-?\d+)_e(?P<end>-?\d+)\.jsonl$")


def read(path: Path, **_: Any) -> SourceRun:
    raw, sha256 = read_source(path)
    records = [_record(row, lineno, f"{path}:{lineno}") for lineno, row in numbered_rows(raw, path)]
    match = _FILE_NAME.match(path.name)
    notes = ["top_p and max_tokens are not written by math_eval.py: unknown"]
    sampling: dict[str, Any] = {"temperature": None, "top_p": None, "max_tokens": None, "seed": None}
    details: dict[str, Any] = {}
    if match:
        sampling.update(temperature=float(match["temperature"]), seed=int(match["seed"]))
        details = {"split": match["split"], "prompt_type": match["prompt_type"],
                   "num_test_sample": int(match["num"]), "start": int(match["start"]), "end": int(match["end"])}
    else:
        notes.append("file name is not math_eval.py's (<split>_<prompt_type>_<n>_seed<S>_t<T>_s<a>_e<b>.jsonl): "
                     "temperature and seed unknown")
    benchmark = path.resolve().parent.name or None  # math_eval.py writes into <output_dir>/<data_name>/
    return SourceRun(TOOL, None, benchmark, records, sampling, details, notes, sha256)


def _record(row: dict[str, Any], lineno: int, where: str) -> SourceRecord:
    idx = require(row, "idx", where, (int, str), "an integer")
    question = require(row, "question", where, str, "a string")
    gold = require(row, "gt", where, (str, int, float), "a string")
    completions = string_list(require(row, "code", where, list, "a list of completions"), where, "code")
    n = len(completions)
    correct = labels(row["score"], n, where, "score") if row.get("score") is not None else ()
    extracted = answers(row.get("pred"), n) if row.get("pred") is not None else ()
    return SourceRecord(lineno, idx, gold, question, None, completions, correct, extracted)
