"""The sample schema: one typed record per samples.jsonl / graded.jsonl line, validated once, when read.

``Sample`` is one completion (docs/run_directory.md "Samples and their key"), ``GradedSample`` a sample with its
grade (graded.jsonl), ``SampleKey`` the key ``(benchmark, phase, problem_id, sample_idx)`` that is
unique within a run. The phase names and the ``default`` benchmark are defined here and nowhere else.

Reading (``read_samples`` / ``read_graded`` / ``SamplesFile.open``) checks every line and raises
DsdrError ``FILE:LINE:FIELD: message``; consumers take the records and never re-check them. Identity
fields (``problem_id``, ``gold``, ``benchmark``) must be non-empty valid Unicode: ``problem_id`` may
be a JSON integer, ``gold`` any finite JSON number, both kept as their exact text (``0.00001`` stays
``0.00001``). In every other string a lone surrogate (``\\ud800``: valid JSON, not valid Unicode) is replaced
by U+FFFD with one warning per field, so one hostile completion cannot stop a run. ``to_json()`` writes a record
back as read (schema fields in docs/run_directory.md's order, then the others).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence

from dsdr_eval.errors import DsdrError, warn
from dsdr_eval.names import DEFAULT_BENCHMARK, PASS1, PHASES, SAMPLING  # the schema's names (a leaf module)
from dsdr_eval.rundir.jsonl import append_bytes, encode_jsonl, field_label, iter_jsonl_numbered, repair_truncated_tail
from dsdr_eval.rundir.json_values import OversizeInt, is_finite_number, is_non_finite_constant, json_type, number_text

REPLACEMENT = "\ufffd"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class SampleKey(NamedTuple):
    """A sample's key, unique within a run (a tuple: it compares equal to the plain 4-tuple)."""

    benchmark: str
    phase: str
    problem_id: str
    sample_idx: int


def clean_text(text: object) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD: what UTF-8 (a file, an HTTP body, the
    Rust tokenizers) can hold. A non-string is "". The project's one text cleaner."""
    return _LONE_SURROGATE.sub(REPLACEMENT, text) if isinstance(text, str) else ""


def _nonneg_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# optional field -> (accepts a non-null value?, what it must be). null means "not recorded".
_OPTIONAL_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sample_idx": (_nonneg_int, "a non-negative integer"),
    "n_prompt_tokens": (_nonneg_int, "a non-negative integer or null"),
    "n_completion_tokens": (_nonneg_int, "a non-negative integer or null"),
    "max_tokens": (lambda v: _nonneg_int(v) and v >= 1, "a positive integer or null"),
    "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer or null"),
    "temperature": (lambda v: is_finite_number(v) and v >= 0, "a finite number >= 0 or null"),
    "top_p": (lambda v: is_finite_number(v) and 0 < v <= 1, "a number in (0, 1] or null"),
    "finish_reason": (lambda v: isinstance(v, str), "a string or null"),
    "reasoning": (lambda v: isinstance(v, str), "a string or null"),
    "reasoning_content": (lambda v: isinstance(v, str), "a string or null"),  # a server's name for it: read as reasoning
    "n_reasoning_tokens": (_nonneg_int, "a non-negative integer or null"),
    "problem": (lambda v: isinstance(v, str), "a string or null"),
    "prompt": (lambda v: isinstance(v, str), "a string or null"),
}
REQUIRED_FIELDS = ("problem_id", "gold", "completion")
_IDENTITY_FIELDS = ("benchmark", "problem_id", "gold", "phase")


@dataclass(frozen=True)
class Sample:
    """One samples.jsonl line (docs/run_directory.md "Samples and their key"; field order = the file's)."""

    benchmark: str
    problem_id: str
    sample_idx: int
    phase: str
    problem: str | None
    gold: str
    answer_meta: Any  # the benchmark's grading metadata (answer_norm), or None
    prompt: str | None
    completion: str
    finish_reason: str | None
    n_prompt_tokens: int | None
    n_completion_tokens: int | None
    temperature: float | None
    top_p: float | None
    max_tokens: int | None
    seed: int | None
    # a thinking model's reasoning when its source gave it apart from the completion (a server's
    # reasoning_content, an importer's split) and its token count; written only when recorded
    reasoning: str | None = None
    n_reasoning_tokens: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # any other field, carried through as read
    absent: frozenset[str] = frozenset()  # schema fields the line did not have (not written back)
    line: int | None = field(default=None, compare=False)  # line number in the file it was read from

    @property
    def key(self) -> SampleKey:
        return SampleKey(self.benchmark, self.phase, self.problem_id, self.sample_idx)

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in SCHEMA_FIELDS if name not in self.absent
               and not (name in WRITTEN_WHEN_RECORDED and getattr(self, name) is None)}
        out.update(self.extra)
        return out


SCHEMA_FIELDS = tuple(name for name in Sample.__dataclass_fields__ if name not in ("extra", "absent", "line"))
WRITTEN_WHEN_RECORDED = frozenset({"reasoning", "n_reasoning_tokens"})  # a null is not written: most models do not reason
GRADE_FIELDS = ("extracted", "extraction", "grade_note", "status", "correct", "answer_class", "reasoning_state",
                "answer_span", "changed_by", "answer_end", "audit")
_LIST_FIELDS = ("answer_span", "changed_by", "audit")  # JSON lists, held as tuples
JUDGE_FIELDS = ("judge_verdict", "judge_model", "judge_note")  # written only when judged (`score --judge-grading`)


@dataclass(frozen=True)
class GradedSample:
    """One graded.jsonl line: a sample plus the fields ``dsdr_eval.grading.grade_samples`` adds."""

    sample: Sample
    status: str  # one of dsdr_eval.grading.STATUSES
    correct: bool
    answer_class: int | None  # math-equivalence class within the problem; None without an answer
    extracted: str | None = None
    extraction: str | None = None
    grade_note: str | None = None
    # dsdr_eval.grading.reasoning: "none" | "closed" | "unclosed"; the graded slice [start, end) of the completion;
    # the rules that changed the extracted answer from the whole completion's (issue 33). None: graded before them.
    reasoning_state: str | None = None
    answer_span: tuple[int, int] | None = None
    changed_by: tuple[str, ...] | None = None
    answer_end: int | None = None  # where the graded answer's statement ends in the completion (issue 42)
    audit: tuple[str, ...] | None = None  # dsdr_eval.grading.audit's flags (None: graded before issue 43)
    # `score --judge-grading`: the judge's verdict (None: not asked/unsure/unavailable), model, why; not ``correct``
    judge_verdict: bool | None = None
    judge_model: str | None = None
    judge_note: str | None = None

    @property
    def key(self) -> SampleKey:
        return self.sample.key

    @property
    def answer_text(self) -> str:
        """The graded part of the completion (the whole completion in a file graded before issue 33)."""
        completion = self.sample.completion
        return completion if self.answer_span is None else completion[self.answer_span[0]:self.answer_span[1]]

    @property
    def line(self) -> int | None:
        return self.sample.line

    def to_json(self) -> dict[str, Any]:
        out = self.sample.to_json()
        out.update((name, getattr(self, name)) for name in GRADE_FIELDS)
        out.update((name, getattr(self, name)) for name in JUDGE_FIELDS if self.judge_model is not None)
        out.update((name, None if out[name] is None else list(out[name])) for name in _LIST_FIELDS)
        return out


# ----------------------------------------------------------------------------- one line

def _describe(value: Any) -> str:
    if isinstance(value, OversizeInt):
        return repr(value)
    text = number_text(value) if not isinstance(value, (str, bool)) else None
    return text if text is not None else (repr(value)[:60] if isinstance(value, str) else
                                          "null" if value is None else json_type(value))


# An identity field -> (its name in messages, the JSON numbers it takes, as their exact text: "any"
# number literal but NaN / Infinity, "int" integers, "" none).
_IDENTITIES = {"gold": ("gold answer", "any"), "problem_id": ("problem id", "int"), "benchmark": ("benchmark name", "")}


def identity_text(value: Any, where: str, kind: str, name: str | None = None) -> str:
    """An identity field (``kind``: gold, problem_id or benchmark) as text: the one check of it, for a
    samples.jsonl line and an imported record alike. A non-empty string of valid Unicode, or a JSON
    number the field takes (a gold: any literal but NaN / Infinity; a problem id: an integer) as its
    exact literal, never a float's repr. ``name``: the field the message names (an importer: the source's own field,
    ``gt``); default ``kind``. DsdrError ``where:name: message``."""
    name = name or kind
    label, numbers = _IDENTITIES[kind]
    if value is None:
        raise DsdrError(f"{where}:{name}: missing {label}")
    if isinstance(value, str):
        found = _LONE_SURROGATE.search(value)
        if found:
            raise DsdrError(f"{where}:{name}: {label} contains a lone surrogate ({field_label(found[0])}), "
                            "which is not valid Unicode")
        if not value.strip():
            raise DsdrError(f"{where}:{name}: empty {label} (got {value!r:.40})")
        return value
    if numbers == "any" and is_non_finite_constant(value):
        raise DsdrError(f"{where}:{name}: {value.text} is not an answer (give the gold answer as a string)")
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if numbers == "any" or (numbers == "int" and is_int):
        text = None if isinstance(value, bool) else number_text(value)
        if text is not None and not (type(value) is float and not math.isfinite(value)):  # a float built in
            return text  # code (nan, inf) has no literal; one read from JSON keeps its text (1e400)
    wanted = {"any": "a string or a number", "int": "a string or an integer", "": "a non-empty string"}[numbers]
    raise DsdrError(f"{where}:{name}: must be {wanted} (got {_describe(value)})")


def _replace_surrogates(value: Any, path: str, where: str, replaced: list[str]) -> Any:
    """Copy of ``value`` with lone surrogates in strings replaced by U+FFFD (``replaced`` gets the
    field paths); a lone surrogate in a key is refused."""
    if isinstance(value, str):
        if _LONE_SURROGATE.search(value):
            replaced.append(path)
            return clean_text(value)
        return value
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if _LONE_SURROGATE.search(key):
                raise DsdrError(f"{where}:{field_label(sub)}: field name contains a lone surrogate "
                                "(not valid Unicode)")
            out[key] = _replace_surrogates(item, sub, where, replaced)
        return out
    if isinstance(value, list):
        return [_replace_surrogates(item, f"{path}.{i}", where, replaced) for i, item in enumerate(value)]
    return value


def _benchmark_and_phase(row: Mapping[str, Any], where: str) -> tuple[str | None, str | None]:
    """A line's ``benchmark`` and ``phase``, checked; None where not given (the schema's default applies)."""
    benchmark = row.get("benchmark")
    if benchmark is not None:
        benchmark = identity_text(benchmark, where, "benchmark")
    phase = row.get("phase")
    if phase is not None and phase not in PHASES:
        raise DsdrError(f"{where}:phase: must be one of {', '.join(PHASES)} (got {_describe(phase)})")
    return benchmark, phase


def parse_key(row: Mapping[str, Any], where: str) -> SampleKey:
    """The SampleKey of a line of a per-sample file written beside samples.jsonl (e.g.
    diversity_per_sample.jsonl): its key fields read as ``parse_sample`` reads them (no benchmark:
    "default", no phase: "sampling"), ``sample_idx`` required. DsdrError ``where:FIELD: ...``."""
    for name in ("problem_id", "sample_idx"):
        if row.get(name) is None:
            raise DsdrError(f"{where}:{name}: missing required field '{name}'")
    problem_id = identity_text(row["problem_id"], where, "problem_id")
    benchmark, phase = _benchmark_and_phase(row, where)
    accepts, wanted = _OPTIONAL_FIELDS["sample_idx"]
    if not accepts(row["sample_idx"]):
        raise DsdrError(f"{where}:sample_idx: must be {wanted} (got {_describe(row['sample_idx'])})")
    return SampleKey(benchmark or DEFAULT_BENCHMARK, phase or SAMPLING, problem_id, row["sample_idx"])


def parse_sample(row: Mapping[str, Any], where: str, *, sample_idx: int = 0,
                 line: int | None = None) -> tuple[Sample, list[str]]:
    """One decoded line -> (Sample, fields whose lone surrogates were replaced); ``where`` is
    ``FILE:LINE``; ``sample_idx`` is used when the line has none. DsdrError ``where:FIELD: ...``."""
    for name in REQUIRED_FIELDS:
        if row.get(name) is None:
            raise DsdrError(f"{where}:{name}: missing required field '{name}'")
    problem_id = identity_text(row["problem_id"], where, "problem_id")
    gold = identity_text(row["gold"], where, "gold")
    if not isinstance(row["completion"], str):
        raise DsdrError(f"{where}:completion: must be a string (got {_describe(row['completion'])})")
    benchmark, phase = _benchmark_and_phase(row, where)
    for name, (accepts, wanted) in _OPTIONAL_FIELDS.items():
        value = row.get(name)
        if value is not None and not accepts(value):
            raise DsdrError(f"{where}:{name}: must be {wanted} (got {_describe(value)})")
    replaced: list[str] = []
    rest = _replace_surrogates({k: v for k, v in row.items() if k not in _IDENTITY_FIELDS}, "", where, replaced)
    values = {name: rest.pop(name, None) for name in SCHEMA_FIELDS if name not in _IDENTITY_FIELDS}
    values["sample_idx"] = sample_idx if values["sample_idx"] is None else values["sample_idx"]
    values["reasoning"] = rest.pop("reasoning_content", None) if values["reasoning"] is None else values["reasoning"]
    absent = frozenset(name for name in SCHEMA_FIELDS if name not in row and name not in ("phase", "sample_idx")
                       and name not in WRITTEN_WHEN_RECORDED)  # those: absent = null, never written
    if benchmark is None:
        absent |= {"benchmark"}  # null = not given: the "default" benchmark everywhere, not written back
    return Sample(benchmark=benchmark or DEFAULT_BENCHMARK, problem_id=problem_id, phase=phase or SAMPLING,
                  gold=gold, extra=MappingProxyType(rest), absent=absent, line=line, **values), replaced


def _grade_fields(row: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The grading fields of a graded line, checked."""
    for name in ("status", "correct"):
        if name not in row:
            raise DsdrError(f"{where}:{name}: missing field '{name}' (a graded file: run `dsdr-eval score`)")
    text = (lambda v: v is None or isinstance(v, str), "a string or null")
    checks = {"status": (lambda v: isinstance(v, str) and v, "a non-empty string"),
              "correct": (lambda v: isinstance(v, bool), "true or false"),
              "answer_class": (lambda v: v is None or _nonneg_int(v), "a non-negative integer or null"),
              **dict.fromkeys(("extracted", "extraction", "grade_note", "reasoning_state", *JUDGE_FIELDS[1:]), text),
              "answer_span": (lambda v: v is None or (isinstance(v, list) and len(v) == 2 and all(map(_nonneg_int, v))
                                                      and v[0] <= v[1] <= len(row.get("completion") or "")),
                              "null or [start, end] within the completion"),
              **dict.fromkeys(("changed_by", "audit"), (lambda v: v is None or (isinstance(v, list) and all(
                  isinstance(x, str) for x in v)), "null or a list of names")),
              "answer_end": (lambda v: v is None or _nonneg_int(v) and v <= len(row.get("completion") or ""), "null or "
                             "an offset within the completion"),
              "judge_verdict": (lambda v: v is None or isinstance(v, bool), "true, false or null")}
    for name, (accepts, wanted) in checks.items():
        if not accepts(row.get(name)):
            raise DsdrError(f"{where}:{name}: must be {wanted} (got {_describe(row.get(name))})")
    return _grade_values(row)


def _grade_values(row: Mapping[str, Any]) -> dict[str, Any]:
    """The grading fields of a row as GradedSample holds them (JSON lists as tuples: records are frozen)."""
    grades = {name: row.get(name) for name in GRADE_FIELDS + JUDGE_FIELDS}
    grades.update((name, None if grades[name] is None else tuple(grades[name])) for name in _LIST_FIELDS)
    return grades


def parse_graded(row: Mapping[str, Any], where: str, *, sample_idx: int = 0,
                 line: int | None = None) -> tuple[GradedSample, list[str]]:
    """One decoded graded.jsonl line -> (GradedSample, replaced fields); see ``parse_sample``."""
    grades = _grade_fields(row, where)
    sample, replaced = parse_sample({k: v for k, v in row.items() if k not in GRADE_FIELDS + JUDGE_FIELDS}, where,
                                    sample_idx=sample_idx, line=line)
    grades = _replace_surrogates(grades, "", where, replaced)  # extracted / grade_note are free text too
    return GradedSample(sample, **grades), replaced


def sample_of(record: Sample | GradedSample) -> Sample:
    """The sample of a record read from samples.jsonl or graded.jsonl."""
    return record.sample if isinstance(record, GradedSample) else record


def graded_from_grader(sample: Sample, row: Mapping[str, Any]) -> GradedSample:
    """A sample and the row ``grade_samples`` returned for it (trusted: our grader wrote it)."""
    return GradedSample(sample, **_grade_values(row))


# ----------------------------------------------------------------------------- a whole file

class _FileChecks:
    """The checks across lines of one file: unique keys, one gold per problem, default sample_idx
    (order of appearance within (benchmark, phase, problem_id)), surrogate warnings per field."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self.keys: dict[SampleKey, int] = {}
        self.golds: dict[tuple[str, str], tuple[str, int]] = {}
        self.next_idx: dict[tuple[str, str, str], int] = {}
        self.replaced: dict[str, list[int]] = {}

    def default_idx(self, row: Mapping[str, Any]) -> int:
        benchmark = row.get("benchmark") if isinstance(row.get("benchmark"), str) else DEFAULT_BENCHMARK
        group = (benchmark, row.get("phase") or SAMPLING, str(row.get("problem_id")))
        return self.next_idx.get(group, 0)

    def add(self, sample: Sample, lineno: int, replaced: Iterable[str] = ()) -> None:
        where = f"{self.path}:{lineno}"
        key = sample.key
        if key in self.keys:
            raise DsdrError(f"{where}:sample_idx: duplicate sample {tuple(key)}: record {lineno} duplicates it "
                            f"(first on line {self.keys[key]})")
        self.keys[key] = lineno
        group = key[:3]
        self.next_idx[group] = max(self.next_idx.get(group, 0), key.sample_idx + 1)
        problem = (sample.benchmark, sample.problem_id)
        first = self.golds.setdefault(problem, (sample.gold, lineno))
        if first[0] != sample.gold:
            raise DsdrError(f"{where}:gold: {sample.gold!r} differs from {first[0]!r} "
                            f"given for the same problem on line {first[1]}")
        for name in replaced:
            self.replaced.setdefault(name, []).append(lineno)

    def warn_replaced(self, on_warning: Callable[[str], None]) -> None:
        for name, lines in self.replaced.items():
            more = f" (and on {len(lines) - 1} more lines)" if len(lines) > 1 else ""
            on_warning(f"{self.path}:{lines[0]}:{field_label(name)}: lone surrogate(s) (not valid Unicode) "
                       f"replaced by U+FFFD{more}")


def _iter_parsed(numbered: Iterable[tuple[int, Mapping[str, Any]]], checks: _FileChecks,
                 parse: Callable[..., tuple[Any, list[str]]], on_warning: Callable[[str], None]) -> Iterator[Any]:
    """Each line parsed and checked against the lines before it; the surrogate warnings after the last line."""
    for lineno, row in numbered:
        record, replaced = parse(row, f"{checks.path}:{lineno}", sample_idx=checks.default_idx(row), line=lineno)
        checks.add(record.sample if isinstance(record, GradedSample) else record, lineno, replaced)
        yield record
    checks.warn_replaced(on_warning)


def _parse_rows(numbered: Iterable[tuple[int, Mapping[str, Any]]], source: str | Path,
                parse: Callable[..., tuple[Any, list[str]]],
                on_warning: Callable[[str], None]) -> tuple[list[Any], _FileChecks]:
    checks = _FileChecks(source)
    return list(_iter_parsed(numbered, checks, parse, on_warning)), checks


def as_graded(rows: Iterable[GradedSample | Mapping[str, Any]], *, source: str = "graded row",
              on_warning: Callable[[str], None] = warn) -> list[GradedSample]:
    """Graded records of in-memory rows: records pass through, dicts are checked as file lines (``SOURCE:N:FIELD``)."""
    rows = list(rows)
    if all(isinstance(row, GradedSample) for row in rows):
        return rows
    records, _ = _parse_rows(((n, row) for n, row in enumerate(rows, start=1)), source,
                             lambda row, where, **kw: (row, []) if isinstance(row, GradedSample)
                             else parse_graded(row, where, **kw), on_warning)
    return records


def iter_records(path: str | Path, parse: Callable[..., tuple[Any, list[str]]] = parse_sample, *,
                 on_warning: Callable[[str], None] = warn, on_partial_tail: Callable[[str], None] | None = None,
                 on_bytes: Callable[[bytes], None] | None = None) -> Iterator[Any]:
    """The records of a samples file (``parse=parse_sample``) or a graded file (``parse_graded``),
    one at a time, each validated as ``read_samples`` / ``read_graded`` validate it (against the
    lines before it): a reader that stops early (a display limit) checks no further. A partial last
    line is skipped with a note to ``on_partial_tail`` (default ``on_warning``); ``on_bytes``: each line's bytes."""
    path = Path(path)
    if not path.is_file():
        raise DsdrError(f"{path}: file not found")
    numbered = iter_jsonl_numbered(path, tolerate_truncated_tail=True, on_warning=on_partial_tail or on_warning,
                                   exact_number_fields=("gold",), on_bytes=on_bytes)  # one line at a time
    yield from _iter_parsed(numbered, _FileChecks(path), parse, on_warning)


def read_samples(path: str | Path, *, on_warning: Callable[[str], None] = warn) -> list[Sample]:
    """Every sample of a samples JSONL, validated (errors ``FILE:LINE:FIELD``); a partial last line: skipped, warned."""
    return SamplesFile.open(path, on_warning=on_warning).samples


def read_graded(path: str | Path, *, on_warning: Callable[[str], None] = warn) -> list[GradedSample]:
    """Every record of a graded.jsonl, validated like ``read_samples`` plus the grading fields."""
    return list(iter_records(path, parse_graded, on_warning=on_warning))


class SamplesFile:
    """samples.jsonl in one process: read (and hashed) once, then appended to; ``samples`` and
    ``sha256`` always describe the file as it is on disk, so later stages need not read it again.

    Files stay the contract between separate commands; this object only saves re-reading the file
    within one (``dsdr-eval run``: resume -> generate -> score)."""

    def __init__(self, path: Path, samples: list[Sample], digest: Any, n_lines: int, checks: _FileChecks) -> None:
        self.path = path
        self.samples = samples
        self._checks = checks
        self._digest = digest  # sha256 of the file's bytes so far
        self.n_lines = n_lines  # the next append starts on line n_lines + 1

    @classmethod
    def open(cls, path: str | Path, *, repair: bool = False, missing_ok: bool = False,
             on_warning: Callable[[str], None] = warn) -> "SamplesFile":
        """Read and validate ``path``. ``repair``: first cut a partial last line (a crash's) so
        appends start on a fresh line. ``missing_ok``: a missing file is an empty one."""
        path = Path(path)
        if missing_ok and not path.exists():
            return cls(path, [], hashlib.sha256(), 0, _FileChecks(path))
        if not path.is_file():
            raise DsdrError(f"{path}: samples file not found")
        if repair:
            repair_truncated_tail(path, on_warning=on_warning)
        # hashed and parsed in one pass, a line at a time: the file's bytes are never all in memory
        digest = hashlib.sha256()
        n_lines = 0

        def read(line: bytes) -> None:
            nonlocal n_lines
            digest.update(line)
            n_lines += line.endswith(b"\n")

        numbered = iter_jsonl_numbered(path, tolerate_truncated_tail=True, on_warning=on_warning,
                                       exact_number_fields=("gold",), on_bytes=read)
        samples, checks = _parse_rows(numbered, path, parse_sample, on_warning)
        return cls(path, samples, digest, n_lines, checks)

    @property
    def keys(self) -> set[SampleKey]:
        return set(self._checks.keys)

    def __contains__(self, key: object) -> bool:
        return key in self._checks.keys

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()

    def append(self, samples: Sequence[Sample], *, fsync: bool = True) -> None:
        """Append ``samples`` (flushed and fsynced: a kill loses at most the last line)."""
        if not samples:
            return
        data = encode_jsonl(sample.to_json() for sample in samples)
        append_bytes(self.path, data, fsync=fsync)  # written first: a generated sample is never lost
        self._digest.update(data)
        first = self.n_lines + 1
        self.n_lines += len(samples)
        numbered = [replace(sample, line=lineno) for lineno, sample in enumerate(samples, start=first)]
        self.samples.extend(numbered)
        for sample in numbered:  # the checks a later read of the file would make
            self._checks.add(sample, sample.line)
