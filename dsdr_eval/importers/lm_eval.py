"""lm-evaluation-harness ``--log_samples`` files: ``samples_<task>_<date>.jsonl``.

One line per (document, filter): ``doc_id``, ``doc`` (the data set row), ``target`` (gold, as a
string), ``arguments`` (``{"gen_args_0": {"arg_0": prompt, "arg_1": generation kwargs}}``),
``resps`` (per request, the ``repeats`` generations: ``[[text, ...]]`` for a ``generate_until``
task), ``filtered_resps`` (per request, after the filter: the first generation's extracted answer
for ``take_first``), ``filter`` (its name), ``metrics`` (metric names) and each metric's value.

A task with several filters logs every document once per filter: one filter is imported
(``filter_name``, default the first one in the file). The per-document metric is the source's
verdict on the filtered response; with one generation per document that is the verdict on it
(``source_correct``, from the first 0/1 metric), with several it is a verdict on whatever the
filter made of them (the first one under ``take_first``, a majority vote under ``maj@k``...), which
the samples file does not say, so no completion gets one.
The harness version is in the ``results_<date>.json`` written beside the samples, when present.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.importers.source import (SourceRecord, SourceRun, answers, numbered_rows, read_source, require,
                                        string_list)
from dsdr_eval.jsonl import read_json

TOOL = "lm-eval"
_FILE_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl$")
# lm-eval generation kwargs -> our sampling settings
_KWARGS = {"temperature": "temperature", "top_p": "top_p", "max_gen_toks": "max_tokens", "seed": "seed"}


def read(path: Path, *, filter_name: str | None = None, **_: Any) -> SourceRun:
    raw, sha256 = read_source(path)
    records: list[SourceRecord] = []
    kwargs_seen: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    for lineno, row in numbered_rows(raw, path):
        where = f"{path}:{lineno}"
        name = require(row, "filter", where, str, "a string")
        filter_name = filter_name if filter_name is not None else name
        if name != filter_name:
            skipped[name] = skipped.get(name, 0) + 1
            continue
        records.append(_record(row, lineno, where))
        kwargs_seen.append(_gen_kwargs(row))
    if not records:
        raise DsdrError(f"{path}: no lines with filter {filter_name!r}" if filter_name else f"{path}: no samples")
    match = _FILE_NAME.match(path.name)
    sampling, notes = _sampling(kwargs_seen)
    if any(len(record.completions) > 1 for record in records):
        notes.append("several generations per document: the per-document metric judges the filter's output "
                     "(first generation, majority vote...), not each completion: no source_correct")
    notes += [f"skipped {n} lines of filter {name!r} (the same generations; import one filter: --lm-eval-filter)"
              for name, n in skipped.items()]
    version, details = _results_file(path, match["date"] if match else None, notes)
    details.update(filter=filter_name, generation_kwargs=kwargs_seen[0] if sampling.pop("_same") else None)
    return SourceRun(TOOL, version, match["task"] if match else None, records, sampling, details, notes, sha256)


def _record(row: dict[str, Any], lineno: int, where: str) -> SourceRecord:
    doc_id = require(row, "doc_id", where, (int, str), "an integer")
    doc = require(row, "doc", where, dict, "an object")
    target = require(row, "target", where, (str, int, float), "a string")
    resps = require(row, "resps", where, list, "a list (one entry per request)")
    if len(resps) != 1:
        raise DsdrError(f"{where}:resps: {len(resps)} requests for one document: a loglikelihood "
                        "(multiple-choice) task; only generate_until tasks have completions to import")
    completions = string_list(resps[0], where, "resps.0")
    filtered = row.get("filtered_resps")
    extracted: tuple[str | None, ...] = ()
    correct: tuple[bool | None, ...] = ()
    if len(completions) == 1 and isinstance(filtered, list) and len(filtered) == 1:
        extracted = answers(filtered[0], 1)  # one generation: the filter's output and verdict are its own
        verdict = _verdict(row)
        correct = () if verdict is None else (verdict,)
    problem = next((doc[k] for k in ("problem", "question", "Question") if isinstance(doc.get(k), str)), None)
    args = (row.get("arguments") or {}).get("gen_args_0") if isinstance(row.get("arguments"), dict) else None
    prompt = args.get("arg_0") if isinstance(args, dict) and isinstance(args.get("arg_0"), str) else None
    return SourceRecord(lineno, doc_id, target, problem, prompt, completions, correct, extracted)


def _verdict(row: dict[str, Any]) -> bool | None:
    """The first metric of the line whose value is a 0/1 verdict (exact_match, math_verify, acc ...)."""
    names = row.get("metrics") if isinstance(row.get("metrics"), list) else []
    for name in names:
        value = row.get(name) if isinstance(name, str) else None
        if isinstance(value, bool) or (isinstance(value, (int, float)) and value in (0, 1)):
            return bool(value)
    return None


def _gen_kwargs(row: dict[str, Any]) -> dict[str, Any]:
    args = row.get("arguments")
    args = args.get("gen_args_0") if isinstance(args, dict) else None
    kwargs = args.get("arg_1") if isinstance(args, dict) else None
    return kwargs if isinstance(kwargs, dict) else {}


def _sampling(kwargs_seen: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """The settings of the generation kwargs (one set for the whole file, else none is claimed)."""
    first = kwargs_seen[0]
    same = all(kwargs == first for kwargs in kwargs_seen)
    notes = [] if same else ["generation kwargs differ between lines: no sampling setting recorded"]
    sampling: dict[str, Any] = {ours: (first.get(theirs) if same else None) for theirs, ours in _KWARGS.items()}
    if same and first.get("do_sample") is False and sampling["temperature"] is None:
        notes.append("do_sample=false (greedy) with no temperature recorded: temperature left unknown")
    sampling["_same"] = same
    return sampling, notes


def _results_file(path: Path, date: str | None, notes: list[str]) -> tuple[str | None, dict[str, Any]]:
    """The harness version (and git hash) from ``results_<date>.json`` beside the samples, if any."""
    results = path.with_name(f"results_{date}.json") if date else None
    if results is None or not results.is_file():
        notes.append("no results_<date>.json beside the samples file: lm-eval version unknown")
        return None, {}
    try:
        content = read_json(results)
    except DsdrError as exc:
        notes.append(f"results file not readable ({exc}): lm-eval version unknown")
        return None, {}
    content = content if isinstance(content, dict) else {}
    version = content.get("lm_eval_version")
    details = {"results_file": results.name, "git_hash": content.get("git_hash"),
               "model_name": content.get("model_name")}
    return (version if isinstance(version, str) else None), details
