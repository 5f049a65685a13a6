"""What every importer reads a source file into, and the checks they share.

An importer turns one result file of another tool into a ``SourceRun``: the tool, its version when
the file says, the sampling settings the file records (None = not recorded, never guessed) and one
``SourceRecord`` per source line (a problem with one or more completions). ``dsdr_eval.importers.write``
turns that into a run directory. Every error is a DsdrError ``FILE:LINE:FIELD: message`` naming the
source's own field (``resps.0``, ``code``, ``gts``), so the user knows what to fix in the file.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.jsonl import iter_jsonl_bytes, read_bytes
from dsdr_eval.rundir.json_values import json_type
from dsdr_eval.rundir.samples import identity_text

SAMPLING_SETTINGS = ("temperature", "top_p", "max_tokens", "seed")  # Sample fields a source may record


class GoldError(DsdrError):
    """A record's gold answer is unusable (missing, empty, NaN, not a string or number): the importer
    skips that record and ``import`` warns once (``--strict``: the import stops with this message)."""


@dataclass(frozen=True)
class SourceRecord:
    """One source line: a problem and its completions (several per line, or one per line of many).

    ``source_correct`` / ``source_extracted``: per completion, the source grader's verdict and
    extracted answer, None where the source has none for that completion."""

    line: int
    problem_id: str | int
    gold: Any
    problem: str | None
    prompt: str | None
    completions: tuple[str, ...]
    source_correct: tuple[bool | None, ...] = ()
    source_extracted: tuple[str | None, ...] = ()
    gold_error: str | None = None  # why ``gold`` is None: the GoldError of an unusable gold (the record may
    # still be imported with the gold of the benchmark problem it matches; else it is skipped)
    # per completion, where the source keeps them apart from the text (a server's reasoning_content,
    # its finish_reason and reasoning token count); empty or None where it does not
    reasoning: tuple[str | None, ...] = ()
    finish_reasons: tuple[str | None, ...] = ()
    n_reasoning_tokens: tuple[int | None, ...] = ()
    n_completion_tokens: tuple[int | None, ...] = ()  # the engine's count, where the source file keeps it


@dataclass(frozen=True)
class SourceRun:
    """A whole source file, read and checked. ``verdict_field``: the source field that holds its
    grader's verdict, None when the format or file has none."""

    tool: str
    version: str | None  # None: the file does not say
    benchmark: str | None  # the source's own name for the task/data set, if it has one
    records: list[SourceRecord]
    sampling: dict[str, Any]  # SAMPLING_SETTINGS -> value, or None when the source did not record it
    details: dict[str, Any] = field(default_factory=dict)  # other recorded settings (filter, step, ...)
    notes: list[str] = field(default_factory=list)  # what was skipped or inferred, and why
    sha256: str = ""  # of the source file's bytes, as read
    file: Path | None = None  # the file read, when PATH was a directory (verl)
    verdict_field: str | None = None
    extraction: tuple[str, str] | None = None  # (profile, why): the answer extraction the source tool used


def read_source(path: Path) -> tuple[bytes, str]:
    """The file's bytes (read once) and their sha256; an unreadable file is a one-line DsdrError."""
    if not path.is_file():
        raise DsdrError(f"{path}: file not found" if not path.exists() else f"{path}: not a regular file")
    try:
        raw = read_bytes(path)
    except OSError as exc:  # permission denied, an I/O error: one line, not a traceback
        raise DsdrError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return raw, hashlib.sha256(raw).hexdigest()


def numbered_rows(raw: bytes, path: Path, gold_fields: Iterable[str] = ()) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) per non-empty line; a bad line is a DsdrError naming file and line. A
    number anywhere in a top-level field of ``gold_fields`` keeps its literal text (``number_text``:
    ``1e400`` stays ``1e400``, not ``inf``), as ``score`` reads a gold."""
    return iter_jsonl_bytes(raw, path, exact_number_fields=tuple(gold_fields))


def gold_text(value: Any, where: str, name: str) -> str:
    """A gold answer as text, checked as samples.jsonl checks ``gold`` (``rundir.samples.identity_text``);
    GoldError (the record is skipped) otherwise."""
    try:
        return identity_text(value, where, "gold", name)
    except DsdrError as exc:
        raise GoldError(str(exc)) from None


def first_gold(row: dict[str, Any], where: str, names: tuple[str, ...],
               transform: Any = None) -> tuple[str, str]:
    """(gold text, field) from the first of ``names`` (dotted) holding a usable gold: the tool's gold
    field, then its documented fallbacks. GoldError of the first field when none does."""
    first: GoldError | None = None
    for name in names:
        try:
            gold = gold_text(get_path(row, name), where, name)
            return (transform(gold) if transform else gold), name
        except GoldError as exc:
            first = first or exc
    assert first is not None
    raise first


def checked_gold(row: dict[str, Any], where: str, names: tuple[str, ...],
                 transform: Any = None) -> tuple[str | None, str | None, str | None]:
    """``first_gold`` as (gold, field, None), or (None, None, the GoldError's message)."""
    try:
        return (*first_gold(row, where, names, transform), None)
    except GoldError as exc:
        return None, None, str(exc)


def setting(value: Any, kind: type = float) -> Any:
    """A recorded sampling setting when it is a finite number (an integer for ``kind=int``); None for
    anything else (a string, a list, NaN): a setting is recorded or unknown, never guessed or coerced."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if kind is int:
        return value if isinstance(value, int) else None
    return value if math.isfinite(value) else None


def get_path(row: dict[str, Any], dotted: str) -> Any:
    """``row["a"]["b"]`` for ``"a.b"``; None when any part is absent."""
    value: Any = row
    for part in dotted.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def require(row: dict[str, Any], name: str, where: str, kind: type | tuple[type, ...], wanted: str) -> Any:
    """Field ``name`` (dotted) of ``row``: present, non-null and of ``kind`` (bool is never an int)."""
    value = get_path(row, name)
    if value is None:
        raise DsdrError(f"{where}:{name}: missing required field '{name}'")
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise DsdrError(f"{where}:{name}: must be {wanted} (got {json_type(value)})")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def string_list(value: Any, where: str, name: str) -> tuple[str, ...]:
    """A non-empty list of strings (the completions of one problem)."""
    if not isinstance(value, list) or not value:
        raise DsdrError(f"{where}:{name}: must be a non-empty list of strings (got {json_type(value)})")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise DsdrError(f"{where}:{name}.{i}: must be a string (got {json_type(item)})")
    return tuple(value)


def as_label(value: Any, where: str, name: str) -> bool:
    """A source's correctness label: true/false or the numbers 0/1 (a reward of exactly 0 or 1)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    raise DsdrError(f"{where}:{name}: must be true/false or 0/1 (got {value!r:.60})")


def labels(value: Any, n: int, where: str, name: str) -> tuple[bool, ...]:
    """Per-completion labels: a list of ``n`` labels, or one label when ``n == 1``."""
    if n == 1 and not isinstance(value, list):
        return (as_label(value, where, name),)
    if not isinstance(value, list) or len(value) != n:
        got = f"{len(value)} items" if isinstance(value, list) else json_type(value)
        raise DsdrError(f"{where}:{name}: must be a list of {n} labels, one per completion (got {got})")
    return tuple(as_label(item, where, f"{name}.{i}") for i, item in enumerate(value))


def answers(value: Any, n: int) -> tuple[str | None, ...]:
    """Per-completion extracted answers as the source wrote them (kept for display only)."""
    items = value if isinstance(value, list) and len(value) == n else [value] if n == 1 else []
    return tuple(item if isinstance(item, str) else None if item is None else str(item) for item in items)


_LATEX_SPACING = re.compile(r"\\(?:left|right|[,;:! ]|quad|qquad)(?![a-zA-Z])|\$|~")
_ONE_CHAR_GROUP = re.compile(r"([_^])\{\s*([^{}\s])\s*\}")  # 17_{b} -> 17_b, x^{2} -> x^2


def match_key(text: str) -> str:
    """How problem texts are compared across tools: the same problem typed by two data sets differs in
    LaTeX that does not change it (``17_{b}`` / ``17_b``, ``\\dfrac`` / ``\\frac``, ``\\left(``, ``$``,
    spacing commands) and in whitespace; those are removed, the rest compared as is (NFKC, casefolded)."""
    text = unicodedata.normalize("NFKC", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = _LATEX_SPACING.sub("", text)
    text = _ONE_CHAR_GROUP.sub(r"\1\2", text)
    return "".join(text.split()).casefold()


_DIAGRAM = re.compile(r"\[asy\].*?\[/asy\]", re.S)  # Asymptote source: some AIME copies carry it, others not
_WORD = re.compile(r"[^\W_]+")
SIMILAR_WITH_GOLD = 0.6  # token overlap (Dice) above which a problem with the same gold is the same problem
SIMILAR_WITHOUT_GOLD = 0.85  # ... and when the source's own gold is unusable (nothing confirms the match)
SIMILAR_MARGIN = 0.15  # the runner-up must be this much less similar, else the match is ambiguous: none


def _words(text: str) -> Counter[str]:
    """The words and numbers of a problem text (NFKC, casefolded, diagrams dropped), with counts."""
    return Counter(_WORD.findall(_DIAGRAM.sub(" ", unicodedata.normalize("NFKC", text)).casefold()))


def _dice(a: Counter[str], b: Counter[str]) -> float:
    total = sum(a.values()) + sum(b.values())
    return 2 * sum((a & b).values()) / total if total else 0.0


class ProblemMatcher:
    """Benchmark problems (``tasks.Problem``) found by their text (``match_key``): the same text
    (``exact``), the problem whose text appears in a prompt (``within``; the longest one when
    several do, so a short problem inside a longer one's text is not taken for it), or the problem
    that shares most of its words and its gold answer (``similar``). Prompts are looked up once each.

    ``similar`` exists because two copies of one benchmark differ in more than LaTeX: measured on a
    real lm-eval 0.4.11 AIME25 file against the registry's AIME25, 22 of 30 problems differ in
    wording ("a real number" / "real numbers"), display math (``\\[ ... \\]``), Markdown
    (``**greedy algorithm**``) or an Asymptote diagram only one copy has. Their true counterparts
    share 74-100 % of their words, the best wrong problem 26-49 %; a match also needs the same gold
    (``SIMILAR_WITH_GOLD``), or 85 % of the words when the source's gold is unusable, and a runner-up
    ``SIMILAR_MARGIN`` behind. A registry problem is taken by one source problem at most."""

    def __init__(self, problems: Iterable[Any]) -> None:
        self._by_length = sorted(problems, key=lambda p: -len(p.problem))
        self._texts = [match_key(p.problem) for p in self._by_length]
        self._exact = {text: p for text, p in zip(reversed(self._texts), reversed(self._by_length))}
        self._within: dict[str, Any] = {}
        self._words: dict[int, Counter[str]] = {}  # id(problem) -> its words, computed when first needed
        self._by_gold: dict[str, list[Any]] = {}
        for problem in self._by_length:
            self._by_gold.setdefault(match_key(str(problem.answer)), []).append(problem)
        self._taken: set[int] = set()  # id() of the problems an ``exact`` or ``similar`` match took
        self._similar: dict[tuple[str, str | None], tuple[Any, float]] = {}  # (text, gold) -> its answer

    def __len__(self) -> int:
        return len(self._by_length)

    def exact(self, text: str) -> Any:
        found = self._exact.get(match_key(text))
        if found is not None:
            self._taken.add(id(found))
        return found

    def within(self, prompt: str) -> Any:
        if prompt not in self._within:
            text = match_key(prompt)
            self._within[prompt] = next((p for p, t in zip(self._by_length, self._texts) if t and t in text), None)
        return self._within[prompt]

    def similar(self, text: str, gold: str | None) -> tuple[Any, float]:
        """(the problem ``text`` is a retyped copy of, its word overlap), or (None, 0.0): among the problems
        with the same gold (all of them when ``gold`` is None), the one sharing most words, when it shares
        enough and no other comes within ``SIMILAR_MARGIN``."""
        if (text, gold) not in self._similar:  # the lines of one problem (one completion per line) look it up once
            self._similar[text, gold] = self._most_similar(text, gold)
        return self._similar[text, gold]

    def _most_similar(self, text: str, gold: str | None) -> tuple[Any, float]:
        candidates = self._by_length if gold is None else self._by_gold.get(match_key(gold), [])
        threshold = SIMILAR_WITHOUT_GOLD if gold is None else SIMILAR_WITH_GOLD
        words = _words(text)
        scored = sorted(((_dice(words, self._problem_words(p)), i) for i, p in enumerate(candidates)
                         if id(p) not in self._taken), reverse=True)
        if not scored or scored[0][0] < threshold or (len(scored) > 1 and scored[0][0] - scored[1][0] < SIMILAR_MARGIN):
            return None, 0.0
        best = candidates[scored[0][1]]
        self._taken.add(id(best))
        return best, scored[0][0]

    def _problem_words(self, problem: Any) -> Counter[str]:
        if id(problem) not in self._words:
            self._words[id(problem)] = _words(problem.problem)
        return self._words[id(problem)]
