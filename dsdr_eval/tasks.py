"""Benchmark registry: the six math evaluation sets of the DSDR paper (Table 1) plus AMC23.

Resolution order for a registered name (e.g. ``math500``):

1. ``data_dir`` argument, else ``$DSDR_DATA_DIR``: ``<dir>/<name>.jsonl`` with ``id``,
   ``problem``, ``answer`` per line (the normalised files described in PROVENANCE.md);
2. the Hugging Face hub through ``datasets.load_dataset(hub_id, config, split=..., revision=...)``
   with the per-benchmark field mapping below.

Any path to a ``.jsonl`` file with ``id``/``problem``/``answer`` is also a benchmark (its name is
the file stem). Every failure is a :class:`DsdrError` naming the benchmark, file and line.
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.jsonl import iter_jsonl_numbered

DATA_DIR_ENV = "DSDR_DATA_DIR"
REQUIRED_FIELDS = ("id", "problem", "answer")
ANSWER_META_FIELDS = ("answer_type", "is_multiple_answer", "unit")  # OlympiadBench; used by the grader
GOLD_FIXES_FILE = Path(__file__).parent / "data" / "gold_fixes.jsonl"


@dataclass(frozen=True)
class Problem:
    benchmark: str
    id: str
    problem: str
    answer: str
    extra: dict = field(default_factory=dict)  # every other field of the source record

    @property
    def answer_meta(self) -> dict | None:
        """The benchmark's answer metadata the grader uses (answer_norm), or None."""
        meta = {k: self.extra[k] for k in ANSWER_META_FIELDS if self.extra.get(k) is not None}
        return meta or None


@dataclass(frozen=True)
class BenchmarkSpec:
    """Where a benchmark lives locally and on the hub, and how hub columns map to our fields.

    ``*_fields`` are candidate column names tried in order (hub datasets of the same benchmark
    differ: ``problem`` vs ``question``, ``answer`` vs ``final_answer``)."""

    name: str
    title: str
    n_problems: int
    local_file: str
    hub_id: str
    hub_split: str
    hub_config: str | None = None
    hub_revision: str | None = None
    id_fields: tuple[str, ...] = ("id",)  # none present -> row index
    problem_fields: tuple[str, ...] = ("problem", "question")
    answer_fields: tuple[str, ...] = ("answer",)
    answer_from_solution: bool = False  # the chosen answer column is a full solution: take its last \boxed{}
    # the answer convention its prompts ask for (a dsdr_eval.grading.extraction profile); None: the protocol's.
    # The six paper benchmarks are prompted for \boxed{} (the protocol's `boxed`).
    extraction: str | None = None


BENCHMARKS: dict[str, BenchmarkSpec] = {
    spec.name: spec
    for spec in (
        BenchmarkSpec("aime24", "AIME 2024 I+II", 30, "aime24.jsonl", "math-ai/aime24", "test",
                      answer_fields=("answer", "solution"), answer_from_solution=True),
        BenchmarkSpec("aime25", "AIME 2025 I+II", 30, "aime25.jsonl", "math-ai/aime25", "test"),
        BenchmarkSpec("math500", "MATH-500 (Let's Verify Step by Step split)", 500, "math500.jsonl",
                      "HuggingFaceH4/MATH-500", "test", id_fields=("unique_id", "id")),
        BenchmarkSpec("minerva", "Minerva Math (OCWCourses)", 272, "minerva.jsonl", "math-ai/minervamath", "test",
                      answer_fields=("answer", "solution"), answer_from_solution=True),
        BenchmarkSpec("olympiadbench", "OlympiadBench OE_TO_maths_en_COMP", 675, "olympiadbench.jsonl",
                      "math-ai/olympiadbench", "test", answer_fields=("answer", "final_answer")),
        BenchmarkSpec("amc23", "AMC 12 2023 (A+B, numeric answers)", 40, "amc23.jsonl", "math-ai/amc23", "test"),
    )
}


def list_benchmarks() -> list[str]:
    return list(BENCHMARKS)


def benchmark_extraction(name: str) -> str | None:
    """The extraction profile a registered benchmark names (None: a file benchmark, or the protocol's)."""
    spec = BENCHMARKS.get(name)
    return spec.extraction if spec is not None else None


def load_benchmark(name_or_path: str, *, data_dir: str | Path | None = None, limit: int | None = None,
                   subset_seed: int | None = None) -> list[Problem]:
    """Load a registered benchmark or a JSONL file; optionally keep ``limit`` problems.

    ``limit`` without ``subset_seed`` keeps the first N problems; with ``subset_seed`` a
    deterministic random N (``random.Random(seed).sample``), kept in their original order."""
    if limit is not None and limit < 1:
        raise DsdrError(f"{name_or_path}: --limit must be >= 1 (got {limit})")
    problems = _load_all(str(name_or_path), data_dir)
    return select_subset(problems, limit=limit, subset_seed=subset_seed)


def select_subset(problems: list[Problem], *, limit: int | None, subset_seed: int | None) -> list[Problem]:
    if limit is None or limit >= len(problems):
        return list(problems)
    if subset_seed is None:
        return list(problems[:limit])
    keep = sorted(random.Random(subset_seed).sample(range(len(problems)), limit))
    return [problems[i] for i in keep]


def resolve_data_dir(data_dir: str | Path | None) -> Path | None:
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env) if env else None


def _looks_like_path(name: str) -> bool:
    return name.endswith(".jsonl") or os.sep in name or "/" in name or Path(name).is_file()


def _load_all(name: str, data_dir: str | Path | None) -> list[Problem]:
    if name in BENCHMARKS:
        spec = BENCHMARKS[name]
        directory = resolve_data_dir(data_dir)
        if directory is not None and (directory / spec.local_file).is_file():
            return load_jsonl_benchmark(directory / spec.local_file, benchmark=name)
        where = (f"{directory / spec.local_file} does not exist" if directory is not None
                 else f"no --data-dir given and ${DATA_DIR_ENV} is not set")
        return _load_from_hub(spec, local_reason=where)
    if _looks_like_path(name):
        path = Path(name)
        if not path.is_file():
            raise DsdrError(f"benchmark file {path}: not found")
        return load_jsonl_benchmark(path, benchmark=path.stem)
    raise DsdrError(f"unknown benchmark {name!r}: known benchmarks are {', '.join(BENCHMARKS)}, "
                    "or pass a path to a .jsonl file with id/problem/answer fields")


def load_jsonl_benchmark(path: str | Path, *, benchmark: str) -> list[Problem]:
    """Read ``id``/``problem``/``answer`` records; errors name the file, line and field."""
    path = Path(path)
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    try:
        numbered = list(iter_jsonl_numbered(path, context=f"benchmark {benchmark}: "))
    except OSError as exc:
        raise DsdrError(f"benchmark {benchmark}: cannot read {path} ({exc.strerror})") from None
    for lineno, record in numbered:
        where = f"benchmark {benchmark}: {path}:{lineno}"
        for name in REQUIRED_FIELDS:
            if name not in record or record[name] is None:
                raise DsdrError(f"{where}: missing field '{name}'")
        values = {}
        for name in REQUIRED_FIELDS:
            value = record[name]
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise DsdrError(f"{where}: field '{name}' must be a string (got {type(value).__name__})")
            values[name] = _number_to_str(value) if not isinstance(value, str) else value
            if not values[name].strip():
                raise DsdrError(f"{where}: field '{name}' is empty")
        if values["id"] in seen:
            raise DsdrError(f"{where}: duplicate id {values['id']!r} (first on line {seen[values['id']]})")
        seen[values["id"]] = lineno
        extra = {k: v for k, v in record.items() if k not in REQUIRED_FIELDS}
        problems.append(_with_gold_fix(Problem(benchmark, values["id"], values["problem"], values["answer"], extra)))
    if not problems:
        raise DsdrError(f"benchmark {benchmark}: {path} has no records")
    return problems


# --- Hugging Face hub -----------------------------------------------------------------------

def _load_from_hub(spec: BenchmarkSpec, *, local_reason: str,
                   loader: Callable[..., Any] | None = None) -> list[Problem]:
    """Load ``spec`` through ``datasets``; any failure (offline, missing columns) is a DsdrError."""
    hint = (f"benchmark {spec.name}: no local file ({local_reason}) and loading the HF hub dataset "
            f"{spec.hub_id} (split {spec.hub_split}) failed")
    if loader is None:
        try:
            from datasets import load_dataset as loader  # heavy import: only when needed
        except ImportError as exc:
            raise DsdrError(f"{hint}: the `datasets` library is not installed ({exc})") from None
    try:
        dataset = loader(spec.hub_id, spec.hub_config, split=spec.hub_split, revision=spec.hub_revision)
        rows = [dict(row) for row in dataset]
    except Exception as exc:  # noqa: BLE001 -- network/offline/auth errors all mean "not available"
        message = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise DsdrError(f"{hint}: {type(exc).__name__}: {message}. Pass --data-dir DIR containing "
                        f"{spec.local_file} or set ${DATA_DIR_ENV}") from None
    return hub_rows_to_problems(spec, rows)


def hub_rows_to_problems(spec: BenchmarkSpec, rows: list[dict[str, Any]]) -> list[Problem]:
    if not rows:
        raise DsdrError(f"benchmark {spec.name}: hub dataset {spec.hub_id} split {spec.hub_split} is empty")
    columns = set(rows[0])

    def pick(candidates: tuple[str, ...], what: str, required: bool = True) -> str | None:
        for name in candidates:
            if name in columns:
                return name
        if required:
            raise DsdrError(f"benchmark {spec.name}: hub dataset {spec.hub_id} has no {what} column "
                            f"(tried {', '.join(candidates)}; columns: {', '.join(sorted(columns))})")
        return None

    id_col = pick(spec.id_fields, "id", required=False)
    problem_col = pick(spec.problem_fields, "problem")
    answer_col = pick(spec.answer_fields, "answer")
    problems = []
    for index, row in enumerate(rows):
        answer = normalise_hub_answer(row[answer_col])
        if spec.answer_from_solution and answer_col != spec.answer_fields[0]:
            from dsdr_eval.grading import extract_answer  # the same \boxed rule as for completions

            answer = extract_answer(answer) or ""
        if not answer.strip():
            raise DsdrError(f"benchmark {spec.name}: hub dataset {spec.hub_id} row {index}: empty answer")
        problem_id = str(row[id_col]) if id_col is not None else str(index)
        extra = {k: v for k, v in row.items() if k not in (id_col, problem_col, answer_col)}
        problems.append(_with_gold_fix(Problem(spec.name, problem_id, str(row[problem_col]), answer, extra)))
    return problems


# --- gold fixes (grading rule "gold_fixes") ---------------------------------------------------

@lru_cache(maxsize=1)
def gold_fixes() -> dict[tuple[str, str], dict[str, str]]:
    """(benchmark, id) -> {original, normalised, why} from the package's gold_fixes.jsonl."""
    fixes: dict[tuple[str, str], dict[str, str]] = {}
    for _, entry in iter_jsonl_numbered(GOLD_FIXES_FILE):
        fixes[(entry["benchmark"], str(entry["id"]))] = entry
    return fixes


def _with_gold_fix(problem: Problem) -> Problem:
    """A gold no parser reads as intended is replaced; the original stays in ``extra``. A fix whose
    ``original`` no longer matches the data is not applied (the data changed: re-check the fix)."""
    fix = gold_fixes().get((problem.benchmark, problem.id))
    if fix is None or fix["original"] != problem.answer:
        return problem
    extra = {**problem.extra, "answer_original": problem.answer, "gold_fix": fix["why"]}
    return Problem(problem.benchmark, problem.id, problem.problem, fix["normalised"], extra)


def normalise_hub_answer(value: Any) -> str:
    """Hub answers come as str, int, float (27.0) or a one-element list (OlympiadBench)."""
    if isinstance(value, (list, tuple)):
        value = ", ".join(normalise_hub_answer(v) for v in value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number_to_str(value)
    text = str(value).strip()
    text = re.sub(r"^\$+|\$+$", "", text).strip()  # OlympiadBench wraps answers in $...$
    return text[:-1] if text.endswith(".") and not text.endswith("..") else text


def _number_to_str(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
