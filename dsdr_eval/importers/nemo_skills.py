"""NeMo-Skills outputs: ``<output_dir>/eval-results/<benchmark>/output-rs<seed>.jsonl`` (``ns eval`` with
``num_random_seeds``), or ``output.jsonl`` (one greedy generation).

Each file is the benchmark's data set, one line per problem in the data set's order, with the
generation added (``nemo_skills/inference/generate.py``) and graded in place
(``nemo_skills/evaluation``): ``generation`` (the completion), ``expected_answer`` (the gold),
``predicted_answer`` (the answer extracted from the last ``\\boxed{}``) and ``symbolic_correct`` (the
symbolic checker's verdict); ``ns eval --judge_model`` adds ``judgement`` ("Judgement: Yes/No" and
the judge's words), which NeMo-Skills' metrics count as correct when the text after the last
"Judgement:" starts with "yes". With ``add_generation_stats`` (the default) it writes
``num_generated_tokens`` and ``num_input_tokens``; a server's reasoning comes as ``reasoning_content``
(with ``num_reasoning_tokens`` when the server counts it) and its ``finish_reason``. With
``parse_reasoning`` (reasoning models) ``generation`` holds the text after the last end-of-thinking
marker (empty when the thinking never ended) and ``_full_generation`` the whole text.

The seed files of one benchmark hold the same problems in the same order (NeMo-Skills' metrics read
line i of every file as problem i): they become one run, the file of seed s giving each problem its
sample ``sample_idx`` s (``output.jsonl``: sample 0). The benchmark is the directory's name under
``eval-results/`` (else ``--benchmark``). Nothing in the files records the sampling settings.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.importers.source import (SourceRecord, SourceRun, as_label, checked_gold, count, numbered_rows,
                                        read_source, require)
from dsdr_eval.rundir.json_values import json_type

TOOL = "nemo-skills"
# releases before October 2024 wrote ``is_correct`` for ``symbolic_correct`` (and ``question``; before
# July 2024 ``generated_solution`` for ``generation``): read as the current names
COMPLETION_FIELDS = ("generation", "generated_solution")
VERDICT_FIELDS = ("symbolic_correct", "is_correct")
SIGNATURES = tuple(frozenset({text, other}) for text in COMPLETION_FIELDS
                   for other in ("expected_answer", "predicted_answer", *VERDICT_FIELDS))
FILE_NAME = re.compile(r"^output(?:-rs(?P<seed>\d+))?\.jsonl$")
EXTRACTION = ("boxed", "NeMo-Skills math_grader.py extract_answer: the last \\boxed{}")
GOLD_FIELDS = ("expected_answer",)
_PROBLEM_FIELDS = ("problem", "question")
_ID_FIELDS = ("id", "unique_id")
_JUDGEMENT = "Judgement:"


def seed_of(path: Path) -> int | None:
    """The seed of ``output-rs<seed>.jsonl``; None for ``output.jsonl`` or another name."""
    match = FILE_NAME.match(path.name)
    return int(match["seed"]) if match and match["seed"] is not None else None


def seed_files(path: Path, notes: list[str]) -> list[Path]:
    """The files to read: PATH itself, or the ``output-rs<seed>.jsonl`` files directly in the directory
    PATH by seed (``output.jsonl`` when there are none: a greedy run beside seeded ones is another protocol)."""
    if not path.is_dir():
        return [path]
    seeded = sorted((file for file in path.iterdir() if seed_of(file) is not None and file.is_file()), key=seed_of)
    greedy = path / "output.jsonl"
    if seeded and greedy.is_file():
        notes.append("output.jsonl (a greedy generation) left out: the seed files output-rs*.jsonl are imported")
    files = seeded or ([greedy] if greedy.is_file() else [])
    if not files:
        raise DsdrError(f"{path}: no NeMo-Skills output files (output-rs<seed>.jsonl or output.jsonl) in this directory")
    return files


def benchmark_name(directory: Path) -> str | None:
    """``<benchmark>`` of ``.../eval-results/<benchmark>/``; None for any other layout."""
    directory = directory.resolve()
    return directory.name if directory.parent.name.startswith("eval-results") and directory.name else None


def read(path: Path, **_: Any) -> SourceRun:
    notes: list[str] = []
    files = seed_files(path, notes)
    seeds = [seed_of(file) for file in files]
    tables, hashes = [], []
    for file in files:
        raw, sha256 = read_source(file)
        hashes.append({"file": file.name, "seed": seed_of(file), "sha256": sha256})
        tables.append([(lineno, row) for lineno, row in numbered_rows(raw, file, GOLD_FIELDS)])
    _check_aligned(files, tables)
    ids = _problem_ids(tables[0], notes)
    records = [_record(files, [table[i] for table in tables], seeds, ids[i], notes) for i in range(len(tables[0]))]
    if not records:
        raise DsdrError(f"{files[0]}: no samples")
    benchmark = benchmark_name(files[0].parent)
    if benchmark is None:
        notes.append(f"{files[0].parent.name}/ is not under eval-results/: benchmark not named by the layout "
                     "(--benchmark names it)")
    unknown = "temperature, top_p, max_tokens" + ("" if None not in seeds else ", seed")
    notes.append(f"NeMo-Skills output files record no sampling settings: {unknown} unknown"
                 + ("; each sample's seed is its file's (output-rs<seed>.jsonl)" if None not in seeds else ""))
    _reasoning_notes(records, notes)
    sampling = {"temperature": None, "top_p": None, "max_tokens": None, "seed": seeds[0] if len(seeds) == 1 else None}
    details = {"files": hashes, "n_seed_files": len(files)}
    digest = hashes[0]["sha256"] if len(hashes) == 1 else hashlib.sha256(
        "".join(f"{h['file']} {h['sha256']}\n" for h in hashes).encode()).hexdigest()
    has_verdict = any(c is not None for record in records for c in record.source_correct)
    verdict = next((name for name in VERDICT_FIELDS if any(name in row for table in tables for _, row in table)),
                   None) if has_verdict else None
    return SourceRun(TOOL, None, benchmark, records, sampling, details, notes, digest,
                     file=path if path.is_dir() else None, verdict_field=verdict,
                     extraction=EXTRACTION)


def _check_aligned(files: list[Path], tables: list[list[tuple[int, dict[str, Any]]]]) -> None:
    """Seed files of one benchmark: as many lines each, line i the same problem and gold in each."""
    for file, table in zip(files[1:], tables[1:]):
        if len(table) != len(tables[0]):
            raise DsdrError(f"{file}: {len(table)} lines, {files[0].name} {len(tables[0])}: the seed files of one "
                            "benchmark hold the same problems (an unfinished generation? import the complete files)")
        for (lineno, row), (first_line, first) in zip(table, tables[0]):
            for name in (*_PROBLEM_FIELDS, *_ID_FIELDS, *GOLD_FIELDS):
                if row.get(name) != first.get(name):
                    raise DsdrError(f"{file}:{lineno}:{name}: differs from line {first_line} of {files[0].name} (the "
                                    "seed files of one benchmark hold the same problems in the same order)")


def _problem_ids(table: list[tuple[int, dict[str, Any]]], notes: list[str]) -> list[str | int]:
    """Each line's problem id: its ``id`` (``unique_id``: MATH-500) when every line has a distinct one,
    else its position in the file (0-based)."""
    for name in _ID_FIELDS:
        ids = [row.get(name) for _, row in table]
        if all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in ids) and len(set(ids)) == len(ids):
            return ids
    notes.append("no distinct id on every line: a problem's id is its line's position in the file (0-based)")
    return list(range(len(table)))


def _record(files: list[Path], lines: list[tuple[int, dict[str, Any]]], seeds: list[int | None],
            problem_id: str | int, notes: list[str]) -> SourceRecord:
    """One problem: its line in every seed file, one completion each."""
    lineno, first = lines[0]
    where = f"{files[0]}:{lineno}"
    gold, _, error = checked_gold(first, where, GOLD_FIELDS)
    problem = next((first[name] for name in _PROBLEM_FIELDS if first.get(name) is not None), None)
    if problem is not None and not isinstance(problem, str):
        raise DsdrError(f"{where}:problem: must be a string (got {json_type(problem)})")
    parts = [_completion(row, f"{file}:{n}") for file, (n, row) in zip(files, lines)]
    column = lambda name: tuple(part[name] for part in parts)  # noqa: E731 -- one column of the per-file parts
    return SourceRecord(lineno, problem_id, gold, problem, None, column("completion"),
                        source_correct=column("correct"), source_extracted=column("extracted"), gold_error=error,
                        reasoning=column("reasoning"), finish_reasons=column("finish_reason"),
                        n_reasoning_tokens=column("n_reasoning_tokens"),
                        n_completion_tokens=column("n_completion_tokens"), n_prompt_tokens=column("n_prompt_tokens"),
                        seeds=tuple(seeds), sample_idx=tuple(0 if s is None else s for s in seeds),
                        source_labels=column("labels"))


def _completion(row: dict[str, Any], where: str) -> dict[str, Any]:
    """One line's completion and what the file records about it, checked."""
    text_field = next((name for name in COMPLETION_FIELDS if name in row), COMPLETION_FIELDS[0])
    completion = require(row, text_field, where, str, "a string")
    verdict = next((name for name in VERDICT_FIELDS if row.get(name) is not None), None)
    predicted = row.get("predicted_answer")
    finish = row.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise DsdrError(f"{where}:finish_reason: must be a string or null (got {json_type(finish)})")
    reasoning = _reasoning(row, completion, where)
    tokens = count(row, "num_reasoning_tokens", where)
    # a server that counts no reasoning tokens reports 0 for a thought it did not parse (inline <think>)
    tokens = None if tokens == 0 and reasoning else tokens
    return {"completion": completion, "finish_reason": finish, "reasoning": reasoning,
            "correct": None if verdict is None else as_label(row[verdict], where, verdict),
            "extracted": None if predicted is None else predicted if isinstance(predicted, str) else str(predicted),
            "n_reasoning_tokens": tokens, "n_completion_tokens": count(row, "num_generated_tokens", where),
            "n_prompt_tokens": count(row, "num_input_tokens", where), "labels": _judge(row, where)}


def _reasoning(row: dict[str, Any], completion: str, where: str) -> str | None:
    """The thought: the server's ``reasoning_content``, else (``parse_reasoning``) the part of
    ``_full_generation`` before the answer kept in ``generation`` (all of it when the thinking never
    ended: ``generation`` is then empty); None when the file keeps none apart."""
    for name in ("reasoning_content", "_full_generation"):
        value = row.get(name)
        if value is not None and not isinstance(value, str):
            raise DsdrError(f"{where}:{name}: must be a string or null (got {json_type(value)})")
    if row.get("reasoning_content"):
        return row["reasoning_content"]
    full = row.get("_full_generation")
    if full is None or full == completion:
        return None
    answer = completion.strip()
    end = full.rstrip().rfind(answer) if answer else len(full)
    if answer and (end < 0 or not full.rstrip().endswith(answer)):
        raise DsdrError(f"{where}:_full_generation: does not end with the generation (the answer part "
                        "parse_reasoning keeps): not one completion")
    return full[:end]


def _judge(row: dict[str, Any], where: str) -> dict[str, Any]:
    """The LLM judge's verdict, as NeMo-Skills' metrics read ``judgement`` (the text after the last
    "Judgement:" starts with yes: correct; anything else: incorrect), with its text."""
    judgement = row.get("judgement")
    if judgement is None:
        return {}
    if not isinstance(judgement, str):
        raise DsdrError(f"{where}:judgement: must be a string or null (got {json_type(judgement)})")
    verdict = judgement.split(_JUDGEMENT)[-1].strip().lower() if _JUDGEMENT in judgement else ""
    return {"source_judge_correct": verdict.startswith("yes"), "source_judgement": judgement}


def _reasoning_notes(records: list[SourceRecord], notes: list[str]) -> None:
    kept = sum(r is not None for record in records for r in record.reasoning)
    if kept:
        notes.append(f"reasoning kept apart from the answer for {kept} completions (reasoning_content, or "
                     "_full_generation before the generation parse_reasoning kept)")
