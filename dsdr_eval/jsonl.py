"""JSONL reading and appending with line-numbered errors and crash-tolerant appends.

Sample files are append-only: a crash (even ``kill -9``) can leave at most one partial final
line, which ``read_jsonl(..., tolerate_truncated_tail=True)`` skips so a resumed run
regenerates exactly that record.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

from dsdr_eval.errors import DsdrError


def iter_jsonl_numbered(path: str | Path, *, tolerate_truncated_tail: bool = False,
                        context: str = "") -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` per non-empty line; DsdrError naming file and line on bad JSON.

    ``context`` prefixes error messages (e.g. ``"benchmark aime24: "``)."""
    path = Path(path)
    if not path.exists():
        raise DsdrError(f"{context}{path}: file not found")
    with path.open("rb") as fh:
        raw = fh.read()
    ends_with_newline = raw.endswith(b"\n")
    lines = raw.split(b"\n")
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            is_last = lineno == len(lines) and not ends_with_newline
            if tolerate_truncated_tail and is_last:
                return  # a partial record from an interrupted append: it will be redone
            raise DsdrError(f"{context}{path}:{lineno}: invalid JSON ({exc})") from None
        if not isinstance(record, dict):
            raise DsdrError(f"{context}{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        yield lineno, record


def iter_jsonl(path: str | Path, *, tolerate_truncated_tail: bool = False) -> Iterator[dict[str, Any]]:
    """Yield one dict per non-empty line; raise DsdrError naming file and line on bad JSON."""
    for _, record in iter_jsonl_numbered(path, tolerate_truncated_tail=tolerate_truncated_tail):
        yield record


def read_jsonl(path: str | Path, *, tolerate_truncated_tail: bool = False) -> list[dict[str, Any]]:
    return list(iter_jsonl(path, tolerate_truncated_tail=tolerate_truncated_tail))


def repair_truncated_tail(path: str | Path) -> int:
    """Cut a partial last line (left by a crash) so later appends start on a fresh line.

    Returns the number of bytes removed."""
    path = Path(path)
    if not path.exists():
        return 0
    with path.open("rb+") as fh:
        data = fh.read()
        if not data or data.endswith(b"\n"):
            return 0
        cut = data.rfind(b"\n") + 1
        fh.truncate(cut)
        return len(data) - cut


def append_jsonl(path: str | Path, records: Iterable[dict[str, Any]], *, fsync: bool = True) -> int:
    """Append records, one line each, flushed (and fsynced) so a kill loses at most the last line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("a", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            n += 1
        fh.flush()
        if fsync:
            os.fsync(fh.fileno())
    return n


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
    """Atomically (re)write a whole JSONL file (write to a temp file, then rename)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def write_json(path: str | Path, obj: Any) -> None:
    """Atomically write pretty JSON (NaN is written as null-safe ``NaN`` per Python's json)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: str | Path) -> Any:
    path = Path(path)
    if not path.exists():
        raise DsdrError(f"{path}: file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DsdrError(f"{path}: invalid JSON at line {exc.lineno} ({exc.msg})") from None
