"""A samples.jsonl / graded.jsonl read one problem at a time, in bounded memory (issue 36).

``ProblemIndex.build`` makes one validating pass over the file (``samples.iter_records``: errors name
FILE:LINE:FIELD before any work starts) and keeps only where each problem's lines are; ``iter_groups``
then reads the file a second time, one line at a time, and yields each problem as soon as its last
line is read. A problem is ``(benchmark, problem_id)``; ``phase`` chooses the lines indexed (the
diversity stage takes the "sampling" rollouts only, scoring every line). ``dsdr-eval diversity`` and
``dsdr-eval score`` both read through here, so neither holds a whole run's texts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsdr_eval.rundir.jsonl import iter_jsonl_numbered
from dsdr_eval.rundir.samples import SAMPLING, iter_records, parse_graded

Parse = Callable[..., tuple[Any, list[str]]]  # samples.parse_sample / parse_graded


@dataclass(frozen=True)
class ProblemIndex:
    """Where each problem's lines are in ``path``. It holds no completion text: a problem's records are
    read when its turn comes (``iter_groups``). ``records``: the file's records already in memory in
    this process (``dsdr-eval run`` right after generating or scoring): then the file is not read and
    positions are indices into ``records``."""

    path: Path
    groups: tuple[tuple[str, str], ...]  # (benchmark, problem_id) in order of first appearance
    sizes: tuple[int, ...]  # indexed lines per group
    lines: Mapping[int, tuple[int, int]]  # line number (position in ``records``) -> (group, sample_idx), file order
    records: Sequence[Any] | None = None
    parse: Parse = parse_graded

    @classmethod
    def build(cls, path: Path, records: Sequence[Any] | None = None, *, parse: Parse = parse_graded,
              phase: str | None = SAMPLING, on_bytes: Callable[[bytes], None] | None = None) -> "ProblemIndex":
        """Index ``path`` (or ``records``); ``phase``: the only phase indexed, None every line.
        ``on_bytes`` sees the file's bytes as read (a hash in the same pass)."""
        group_of: dict[tuple[str, str], int] = {}
        sizes: list[int] = []
        lines: dict[int, tuple[int, int]] = {}
        source = records if records is not None else iter_records(path, parse, on_bytes=on_bytes)
        for position, record in enumerate(source):
            if phase is not None and record.key.phase != phase:
                continue
            group = group_of.setdefault((record.key.benchmark, record.key.problem_id), len(group_of))
            if group == len(sizes):
                sizes.append(0)
            sizes[group] += 1
            lines[position if records is not None else record.line] = (group, record.key.sample_idx)
        return cls(path, tuple(group_of), tuple(sizes), lines, records, parse)


def iter_numbered(index: ProblemIndex) -> Iterator[tuple[int, Any]]:
    """(position, record) of every indexed line, in file order: the file read again a line at a time
    (already validated by the index pass: its warnings are not repeated)."""
    if index.records is not None:
        return ((position, record) for position, record in enumerate(index.records) if position in index.lines)
    return ((lineno, index.parse(row, f"{index.path}:{lineno}", sample_idx=index.lines[lineno][1], line=lineno)[0])
            for lineno, row in iter_jsonl_numbered(index.path, tolerate_truncated_tail=True, on_warning=lambda _: None,
                                                   exact_number_fields=("gold",))
            if lineno in index.lines)


def iter_groups(index: ProblemIndex) -> Iterator[tuple[int, list[tuple[int, Any]]]]:
    """(group, its (position, record) pairs in file order) in order of first appearance, each as soon
    as its last line is read.

    The records of a problem whose lines are interleaved with others' (concurrent engines append in
    the order requests finish) wait in memory until the problem is complete, and a complete problem
    waits for the earlier ones, so the memory held is that of the problems in flight: one when the
    file is grouped by problem."""
    pending: dict[int, list[tuple[int, Any]]] = {}
    complete: dict[int, list[tuple[int, Any]]] = {}
    next_group = 0
    for position, record in iter_numbered(index):
        group = index.lines[position][0]
        members = pending.setdefault(group, [])
        members.append((position, record))
        if len(members) == index.sizes[group]:
            complete[group] = pending.pop(group)
        while next_group in complete:
            yield next_group, complete.pop(next_group)
            next_group += 1
