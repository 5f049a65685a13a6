"""lighteval details: ``<output_dir>/details/<model_name>/<date>/details_<task>_<date>.parquet``.

One row per document (``EvaluationTracker.save``: ``asdict(Detail)``, columns sorted): ``doc`` (the
``Doc``: ``id``, ``query``, ``choices``, ``gold_index``, ``original_query``, ``generation_size``,
``num_samples``, ...), ``model_response`` (``text``: the generations, ``input``: the prompt, ...)
and ``metric`` (metric name -> the document's value). The gold is ``choices[gold_index]``
(``Doc.get_golds``). As for lm-eval, a per-document metric is a completion's verdict only when the
document has one generation. Generation parameters (temperature, top_p, max_new_tokens, seed) and
the lighteval commit are in ``<output_dir>/results/<model_name>/results_<date>.json``, when present;
the token limit falls back to the documents' ``generation_size``. Reading parquet needs pyarrow.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.importers.source import (GoldError, SourceRecord, SourceRun, answers, gold_text, read_source, require,
                                        setting, string_list)
from dsdr_eval.rundir.jsonl import read_json
from dsdr_eval.rundir.json_values import json_type

TOOL = "lighteval"
FILE_NAME = re.compile(r"^details_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.parquet$")
# lighteval's math metrics (extractive_match / math-verify) read the last \boxed{} or final LaTeX / number
EXTRACTION = ("flexible", "lighteval extractive match: boxed, then the final expression or number")
_PARAMETERS = {"temperature": "temperature", "top_p": "top_p", "max_new_tokens": "max_tokens", "seed": "seed"}


def _rows(path: Path) -> tuple[list[dict[str, Any]], str]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DsdrError(f"{path}: reading lighteval parquet details needs pyarrow (pip install pyarrow)") from None
    raw, sha256 = read_source(path)
    try:
        table = pq.read_table(pa.BufferReader(raw))  # the bytes hashed are the bytes read
    except Exception as exc:  # noqa: BLE001 -- any pyarrow failure means "not a readable parquet file"
        raise DsdrError(f"{path}: not a readable parquet file ({type(exc).__name__}: {exc})") from None
    columns = {name: _column(table.column(name), path, name) for name in table.column_names}
    rows = [{name: values[i] for name, values in columns.items()} for i in range(table.num_rows)]
    return rows, sha256


# what pyarrow raises for a value Python cannot hold (ArrowInvalid is a ValueError, ArrowTypeError a
# TypeError, ArrowNotImplementedError a NotImplementedError; datetime out of range: OverflowError)
_UNREADABLE = (ValueError, OverflowError, ArithmeticError, TypeError, NotImplementedError)


def _column(column: Any, path: Path, name: str) -> list[Any]:
    """One column as Python values; a value Python cannot hold (a timestamp out of datetime's range, a
    decimal out of range) is a DsdrError naming its row (counted from 1) and column."""
    try:
        return column.to_pylist()
    except _UNREADABLE:
        pass
    for row, scalar in enumerate(column, start=1):  # find the row at fault
        try:
            scalar.as_py()
        except _UNREADABLE as exc:
            raise DsdrError(f"{path}:{row}:{name}: value cannot be read ({type(exc).__name__}: {exc})") from None
    raise DsdrError(f"{path}:{name}: column cannot be read")


def _mapping(value: Any, where: str, name: str) -> dict[str, Any]:
    """A struct (dict) or a parquet map (a list of (key, value) pairs) as a dict; {} for null."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and all(isinstance(item, tuple) and len(item) == 2 for item in value):
        return dict(value)
    raise DsdrError(f"{where}:{name}: must be a struct or a map of metric name -> value (got {json_type(value)})")


def read(path: Path, **_: Any) -> SourceRun:
    rows, sha256 = _rows(path)
    records = [_record(row, n, f"{path}:{n}") for n, row in enumerate(rows, start=1)]
    if not records:
        raise DsdrError(f"{path}: no samples")
    match = FILE_NAME.match(path.name)
    notes: list[str] = []
    version, parameters = _results_file(path, match["date"] if match else None, notes)
    sampling = {ours: setting(parameters.get(theirs), int if ours in ("max_tokens", "seed") else float)
                for theirs, ours in _PARAMETERS.items()}
    sizes = [row["doc"].get("generation_size") for row in rows]  # every doc is a dict: _record checked it
    same_size = bool(sizes) and setting(sizes[0], int) is not None and sizes.count(sizes[0]) == len(sizes)
    if sampling["max_tokens"] is None and same_size:
        sampling["max_tokens"] = sizes[0]
        notes.append("max_tokens from the documents' generation_size")
    if any(len(record.completions) > 1 for record in records):
        notes.append("several generations per document: the per-document metric is not a completion's "
                     "verdict: no source_correct")
    details = {"row_label": "parquet row number (counted from 1) in place of a line number"}
    has_metric = any(row.get("metric") for row in rows)
    return SourceRun(TOOL, version, match["task"] if match else None, records, sampling, details, notes, sha256,
                     verdict_field="metric" if has_metric else None, extraction=EXTRACTION)


def _record(row: dict[str, Any], n: int, where: str) -> SourceRecord:
    doc = require(row, "doc", where, dict, "a struct (lighteval Doc)")
    response = require(row, "model_response", where, dict, "a struct (lighteval ModelResponse)")
    completions = string_list(require(row, "model_response.text", where, list, "a list of generations"),
                              where, "model_response.text")
    choices = require(row, "doc.choices", where, list, "a list")
    gold_index = require(row, "doc.gold_index", where, (int, list), "an integer")
    if isinstance(gold_index, list):
        if len(gold_index) != 1:
            raise DsdrError(f"{where}:doc.gold_index: {len(gold_index)} golds; one gold answer per problem is needed")
        gold_index = gold_index[0]
    if not isinstance(gold_index, int) or not 0 <= gold_index < len(choices):
        raise DsdrError(f"{where}:doc.gold_index: {gold_index!r} is not an index of doc.choices "
                        f"({len(choices)} choices)")
    try:
        gold, error = gold_text(choices[gold_index], where, f"doc.choices.{gold_index}"), None
    except GoldError as exc:
        gold, error = None, str(exc)
    metric = _mapping(row.get("metric"), where, "metric")
    correct: tuple[bool | None, ...] = ()
    extracted: tuple[str | None, ...] = ()
    if len(completions) == 1:
        verdict = next((bool(v) for v in metric.values()
                        if isinstance(v, bool) or (isinstance(v, (int, float)) and v in (0, 1))), None)
        correct = () if verdict is None else (verdict,)
        processed = response.get("text_post_processed")
        extracted = answers(processed, 1) if isinstance(processed, list) else ()
    problem = doc.get("original_query") if isinstance(doc.get("original_query"), str) else None
    prompt = response.get("input") if isinstance(response.get("input"), str) else doc.get("query")
    problem_id = doc.get("id") if isinstance(doc.get("id"), str) and doc.get("id") else n - 1
    return SourceRecord(n, problem_id, gold, problem, prompt if isinstance(prompt, str) else None,
                        completions, correct, extracted, error)


def _results_file(path: Path, date: str | None, notes: list[str]) -> tuple[str | None, dict[str, Any]]:
    """(lighteval commit, generation parameters) from the results file of the same run, if found."""
    results = _results_path(path, date)
    if results is None:
        notes.append("no results_<date>.json found for these details: lighteval version and generation "
                     "parameters unknown")
        return None, {}
    try:
        content = read_json(results)
    except (DsdrError, OSError) as exc:  # a results file we cannot read only loses the version
        notes.append(f"results file not readable ({exc}): version and generation parameters unknown")
        return None, {}
    general = content.get("config_general") if isinstance(content, dict) else None
    general = general if isinstance(general, dict) else {}
    model_config = general.get("model_config") if isinstance(general.get("model_config"), dict) else {}
    parameters = model_config.get("generation_parameters")
    sha = general.get("lighteval_sha")
    return (f"git {sha}" if isinstance(sha, str) and sha else None), (parameters if isinstance(parameters, dict) else {})


def _results_path(path: Path, date: str | None) -> Path | None:
    """``<output_dir>/results/<model_name>/results_<date>.json`` for ``<output_dir>/details/<model_name>/<date>/...``."""
    if date is None:
        return None
    date_dir = path.parent
    for ancestor in date_dir.parents:
        if ancestor.name == "details":
            model = date_dir.parent.relative_to(ancestor)
            candidate = ancestor.parent / "results" / model / f"results_{date}.json"
            return candidate if candidate.is_file() else None
    return None
