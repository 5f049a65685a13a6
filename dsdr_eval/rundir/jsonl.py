"""JSONL reading and writing: line-numbered errors, crash-tolerant appends, atomic rewrites.

Reading is strict: every line must be one JSON object in UTF-8; a bad line raises DsdrError
``FILE:LINE: message`` (``FILE:LINE:FIELD: message`` when one field is at fault). Beyond what the
json module checks, a line is refused for a duplicate key (which value would win is a guess), an
integer literal over Python's 4,300-digit conversion limit, nesting deeper than the decoder can
follow, and bytes that are not UTF-8. A leading byte-order mark, CRLF endings and blank lines are
accepted: they change no value. A JSON number can keep its literal text (``number_text``), so a
caller that wants text (a gold answer, ``exact_number_fields``) gets ``0.00001``, not ``1e-05``.

Sample files are append-only: a crash (even ``kill -9``) can leave at most one partial final line
(no newline, a prefix of a JSON object). ``tolerate_truncated_tail=True`` skips exactly that, with a
warning, so a resumed run regenerates the record; a final line that is not such a prefix is an error.

Writers never leave a temp file behind and never fail on lone surrogates (written as JSON ``\\uXXXX``
escapes, which read back to the same string).
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from dsdr_eval.errors import DsdrError, warn
from dsdr_eval.rundir.json_values import NON_FINITE_CONSTANTS, ExactFloat, OversizeInt, json_type

BOM = b"\xef\xbb\xbf"
_MAX_INT_DIGITS = 4300  # Python's default int <-> str conversion limit (sys.get_int_max_str_digits)
_NUMBER_FRAGMENT = re.compile(r"[-+.eE0-9]+")


class _DuplicateKeys(dict):
    """A decoded object that had repeated keys (``duplicates``); the reader refuses it."""

    duplicates: tuple[str, ...] = ()


class _Decoder:
    """json decoding with duplicate-key detection; a slower exact pass only where it is needed.

    The fast pass uses the C number parsers. A line is decoded again with the exact hooks
    (``ExactFloat`` literals, ``OversizeInt`` instead of int()'s ValueError) when an integer is over
    the conversion limit or when a top-level field in ``exact_fields`` holds a number."""

    def __init__(self, exact_fields: Iterable[str] = ()) -> None:
        self.suspect = False  # the last record holds a _DuplicateKeys / OversizeInt somewhere
        self.exact_fields = tuple(exact_fields)
        # one decoder each for the whole file: json.loads(text, **hooks) would build a scanner per line
        self._fast = json.JSONDecoder(object_pairs_hook=self._object)
        self._exact = json.JSONDecoder(parse_float=ExactFloat, parse_int=self._int, parse_constant=ExactFloat,
                                       object_pairs_hook=self._object)

    def _int(self, text: str) -> int | OversizeInt:
        if len(text) - text.startswith("-") > _MAX_INT_DIGITS:
            self.suspect = True
            return OversizeInt(text)
        return int(text)

    def _object(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        self.suspect = True
        seen: set[str] = set()
        flagged = _DuplicateKeys(obj)
        flagged.duplicates = tuple(k for k, _ in pairs if k in seen or seen.add(k))
        return flagged

    def loads(self, text: str) -> Any:
        self.suspect = False
        try:
            record = self._fast.decode(text)
        except json.JSONDecodeError:
            raise
        except ValueError:  # an integer literal over int()'s digit limit
            self.suspect = False
            return self._exact.decode(text)
        if self.exact_fields and isinstance(record, dict) and any(
                _holds_number(record.get(name)) for name in self.exact_fields):
            self.suspect = False
            record = self._exact.decode(text)
        return record


def _holds_number(value: Any) -> bool:
    """A number (not a bool) anywhere in ``value``: an exact field may nest its number (verl ``gts: [1e400]``)."""
    stack = [value]  # iterative: a line nested as deep as the decoder allows must not overflow here
    while stack:
        item = stack.pop()
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            return True
        stack.extend(item.values() if isinstance(item, dict) else item if isinstance(item, list) else ())
    return False


def _find_problem(value: Any, path: str = "", exact_number_fields: Iterable[str] = ()) -> tuple[str, str] | None:
    """(dotted field path, message) of the first duplicate key / oversize integer in ``value``
    (an oversize integer is fine as the whole value of a top-level field in ``exact_number_fields``)."""
    if isinstance(value, _DuplicateKeys):
        key = value.duplicates[0]
        return (f"{path}.{key}" if path else key), f"duplicate key {key!r} (which value is meant is ambiguous)"
    if isinstance(value, OversizeInt):
        return path, (f"integer literal of {len(value.text.lstrip('-'))} digits is over the "
                      f"{_MAX_INT_DIGITS}-digit limit")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if not path and key in exact_number_fields and isinstance(item, OversizeInt):
            continue
        found = _find_problem(item, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


def field_label(name: str) -> str:
    """A field name as it appears in a message (lone surrogates as ``\\udXXX`` escapes)."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _locate_bad_bytes(line: bytes) -> str:
    """The field holding the first non-UTF-8 byte ('' when it lies outside any string)."""
    text = line.decode("utf-8", "surrogateescape")
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return ""
    bad = re.compile("[\udc80-\udcff]")

    def walk(value: Any, path: str) -> str | None:
        if isinstance(value, str):
            return path if bad.search(value) else None
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and bad.search(key):
                return field_label(where)
            found = walk(item, where)
            if found:
                return found
        return None

    return walk(record, "") or ""


def looks_truncated(line: bytes) -> bool:
    """Whether ``line`` is a cut-off prefix of a JSON object (what an interrupted append leaves)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason != "unexpected end of data":
            return False
        text = line[:exc.start].decode("utf-8", "replace")  # a multi-byte character cut at the end
    text = text.lstrip("\ufeff").strip()
    if not text.startswith("{"):
        return False
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg.startswith("Unterminated string"):
            return True
        if exc.msg.startswith("Extra data"):
            return False
        rest = text[exc.pos:]
        if exc.msg.startswith("Invalid \\"):  # an escape cut mid-way, inside an unterminated string
            return '"' not in rest
        return (not rest or any(word.startswith(rest) for word in ("true", "false", "null", *NON_FINITE_CONSTANTS))
                or bool(_NUMBER_FRAGMENT.fullmatch(rest)))
    except (ValueError, RecursionError):
        return False
    return False  # it parses: a complete record


def _decode_line(decoder: _Decoder, line: bytes, where: str) -> dict[str, Any]:
    """One JSONL line -> dict; DsdrError ``where: ...`` / ``where:FIELD: ...`` otherwise."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        field = _locate_bad_bytes(line)
        prefix = f"{where}:{field}" if field else where
        raise DsdrError(f"{prefix}: not valid UTF-8 (byte 0x{line[exc.start]:02x} at byte {exc.start + 1} "
                        "of the line)") from None
    if text.startswith("\ufeff"):
        text = text[1:]  # a byte-order mark (files concatenated from an editor's output)
    try:
        record = decoder.loads(text)
    except json.JSONDecodeError as exc:
        raise DsdrError(f"{where}: invalid JSON ({exc.msg}; column {exc.colno})") from None
    except RecursionError:
        raise DsdrError(f"{where}: invalid JSON (nested deeper than the decoder can follow)") from None
    if not isinstance(record, dict):
        raise DsdrError(f"{where}: expected a JSON object, got {json_type(record)}")
    if decoder.suspect:
        found = _find_problem(record, exact_number_fields=decoder.exact_fields)
        if found:
            field, message = found
            raise DsdrError(f"{where}:{field_label(field)}: {message}")
    return record


MAX_JSON_BYTES = 64 << 20  # a JSON document of a run directory (config / metrics / sweep.json) is kilobytes


def read_bytes(path: str | Path, *, context: str = "", max_bytes: int | None = None) -> bytes:
    """The whole of a regular file: DsdrError ``FILE: reason`` when absent, unreadable, larger than
    ``max_bytes``, or not a regular file (a directory; a FIFO would block, /dev/zero never ends)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # O_NONBLOCK: opening a FIFO never waits
        _check_regular(fd, f"{context}{path}", max_bytes)
        with os.fdopen(fd, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        raise DsdrError(f"{context}{path}: file not found") from None
    except OSError as exc:
        raise DsdrError(f"{context}{path}: cannot read ({exc.strerror or type(exc).__name__})") from None


def _check_regular(fd: int, where: str, max_bytes: int | None) -> None:
    """Nothing for a regular file within ``max_bytes``; else closes ``fd`` and raises DsdrError."""
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and (max_bytes is None or info.st_size <= max_bytes):
        return
    os.close(fd)
    raise DsdrError(f"{where}: " + ("a directory, not a file" if stat.S_ISDIR(info.st_mode) else "not a regular file "
                    "(a FIFO, device or socket)" if not stat.S_ISREG(info.st_mode) else f"{info.st_size} bytes, over "
                    f"the {max_bytes}-byte limit for this file"))


def iter_jsonl_numbered(path: str | Path, *, tolerate_truncated_tail: bool = False, context: str = "",
                        on_warning: Callable[[str], None] = warn,
                        exact_number_fields: Iterable[str] = (),
                        on_bytes: Callable[[bytes], None] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` per non-empty line; DsdrError naming file and line on a bad line.

    ``context`` prefixes error messages (e.g. ``"benchmark aime24: "``); ``on_warning`` receives the
    one-line warning about a skipped partial last line; a number in a top-level field named in
    ``exact_number_fields`` keeps its literal (``number_text``), even an integer over the conversion
    limit (an OversizeInt, refused anywhere else). The file is read one line at a time: memory holds
    one line, whatever the file's size (a paper-scale graded.jsonl is gigabytes). ``on_bytes`` sees
    every line's bytes as read, a skipped partial last line included (a hash of the whole file in the
    same pass)."""
    where = f"{context}{path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # O_NONBLOCK: opening a FIFO never waits
        _check_regular(fd, where, None)
        handle = os.fdopen(fd, "rb")
    except FileNotFoundError:
        raise DsdrError(f"{where}: file not found") from None
    except OSError as exc:
        raise DsdrError(f"{where}: cannot read ({exc.strerror or type(exc).__name__})") from None
    with handle:
        lines = _read_lines(handle, where)
        if on_bytes is not None:
            lines = _observed(lines, on_bytes)
        yield from _iter_numbered(lines, path, tolerate_truncated_tail=tolerate_truncated_tail,
                                  context=context, on_warning=on_warning, exact_number_fields=exact_number_fields)


def _read_lines(handle: Any, where: str) -> Iterator[bytes]:
    """The lines of an open binary file, each with its ``\n`` when it has one; an OS error while
    reading is a one-line DsdrError."""
    while True:
        try:
            line = handle.readline()
        except OSError as exc:
            raise DsdrError(f"{where}: cannot read ({exc.strerror or type(exc).__name__})") from None
        if not line:
            return
        yield line


def _observed(lines: Iterator[bytes], on_bytes: Callable[[bytes], None]) -> Iterator[bytes]:
    for line in lines:
        on_bytes(line)
        yield line


def iter_jsonl_bytes(raw: bytes, path: str | Path, *, tolerate_truncated_tail: bool = False, context: str = "",
                     on_warning: Callable[[str], None] = warn,
                     exact_number_fields: Iterable[str] = ()) -> Iterator[tuple[int, dict[str, Any]]]:
    """``iter_jsonl_numbered`` over the bytes of ``path`` already in memory (read once, e.g. to hash them)."""
    return _iter_numbered(io.BytesIO(raw), path, tolerate_truncated_tail=tolerate_truncated_tail, context=context,
                          on_warning=on_warning, exact_number_fields=exact_number_fields)


def _iter_numbered(lines: Iterable[bytes], path: str | Path, *, tolerate_truncated_tail: bool, context: str,
                   on_warning: Callable[[str], None],
                   exact_number_fields: Iterable[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The records of ``lines`` (a file's lines, each with its ``\n`` but the last possibly without)."""
    decoder = _Decoder(exact_number_fields)
    for lineno, line in enumerate(lines, start=1):
        if lineno == 1 and line.startswith(BOM):
            line = line[len(BOM):]
        is_last = not line.endswith(b"\n")  # only the file's last line can lack its newline
        line = line if is_last else line[:-1]
        if not line.strip():
            continue
        where = f"{context}{path}:{lineno}"
        if tolerate_truncated_tail and is_last and looks_truncated(line):
            on_warning(f"{where}: skipped a partial last line ({len(line)} bytes, no newline: an interrupted "
                       "append); it is not counted")
            return
        yield lineno, _decode_line(decoder, line, where)


def iter_jsonl(path: str | Path, *, tolerate_truncated_tail: bool = False,
               on_warning: Callable[[str], None] = warn) -> Iterator[dict[str, Any]]:
    """Yield one dict per non-empty line; raise DsdrError naming file and line on a bad line."""
    for _, record in iter_jsonl_numbered(path, tolerate_truncated_tail=tolerate_truncated_tail,
                                         on_warning=on_warning):
        yield record


def read_jsonl(path: str | Path, *, tolerate_truncated_tail: bool = False) -> list[dict[str, Any]]:
    return list(iter_jsonl(path, tolerate_truncated_tail=tolerate_truncated_tail))


def repair_truncated_tail(path: str | Path, *, on_warning: Callable[[str], None] = warn) -> int:
    """Make the file end with a newline so later appends start on a fresh line.

    A partial last line (left by a crash) is cut, with a warning; a complete last record that only
    lacks its newline gets one. Anything else on the last line is left alone and refused as bad
    input (DsdrError naming the line). Returns the number of bytes removed."""
    path = Path(path)
    if not path.exists():
        return 0
    with path.open("rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if not size or _read_at(fh, size - 1, 1) == b"\n":
            return 0
        cut, tail = _last_line(fh, size)
        if not tail.strip():
            return 0
        lineno = _count_newlines(fh, cut) + 1
        if looks_truncated(tail):
            fh.truncate(cut)
            on_warning(f"{path}:{lineno}: cut a partial last line ({len(tail)} bytes, no newline: an "
                       "interrupted append); that record is redone")
            return len(tail)
        _decode_line(_Decoder(), tail, f"{path}:{lineno}")  # raises for garbage
        fh.seek(0, os.SEEK_END)
        fh.write(b"\n")
        return 0


def _read_at(fh: Any, offset: int, n: int) -> bytes:
    fh.seek(offset)
    return fh.read(n)


def _last_line(fh: Any, size: int, block: int = 1 << 16) -> tuple[int, bytes]:
    """(offset, bytes) of the text after the last newline of a file of ``size`` bytes (read backwards:
    a resume checks its tail without reading the whole file)."""
    end = size
    while end > 0:
        start = max(0, end - block)
        found = _read_at(fh, start, end - start).rfind(b"\n")
        if found >= 0:
            cut = start + found + 1
            return cut, _read_at(fh, cut, size - cut)
        end = start
    return 0, _read_at(fh, 0, size)


def _count_newlines(fh: Any, end: int, block: int = 1 << 20) -> int:
    """Newlines in the first ``end`` bytes (only for the line number of a message)."""
    fh.seek(0)
    count, left = 0, end
    while left > 0:
        chunk = fh.read(min(block, left))
        count += chunk.count(b"\n")
        left -= len(chunk)
    return count


def _encode_line(record: Any, **dumps_options: Any) -> bytes:
    """One JSON text as UTF-8; lone surrogates become ``\\uXXXX`` escapes (valid JSON, same string)."""
    return json.dumps(record, ensure_ascii=False, **dumps_options).encode("utf-8", "backslashreplace")


def encode_jsonl(records: Iterable[Any]) -> bytes:
    """Records as JSONL bytes, one line each (what ``append_jsonl`` / ``write_jsonl`` write)."""
    return b"".join(jsonl_chunks(records))


def jsonl_chunks(records: Iterable[Any]) -> Iterator[bytes]:
    """Records as JSONL lines (bytes), one at a time (``rundir.commit_files`` takes them)."""
    for record in records:
        yield _encode_line(record) + b"\n"


def append_bytes(path: str | Path, data: bytes, *, fsync: bool = True) -> None:
    """Append ``data``, flushed (and fsynced) so a kill loses at most the last line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as fh:
        fh.write(data)
        fh.flush()
        if fsync:
            os.fsync(fh.fileno())


def append_jsonl(path: str | Path, records: Iterable[dict[str, Any]], *, fsync: bool = True) -> int:
    """Append records, one line each, flushed (and fsynced) so a kill loses at most the last line."""
    data = encode_jsonl(records)
    append_bytes(path, data, fsync=fsync)
    return data.count(b"\n")


def atomic_temp(path: Path, chunks: Iterable[bytes]) -> Path:
    """Write ``chunks`` (flushed to disk) to a new temp file beside ``path``, mode 0666 less the umask
    (mkstemp's 0600 would stay after the rename); returns its path. On any failure it is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.urandom(8).hex()}.tmp"  # 64 random bits: O_EXCL meets no other
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())  # a rename must not publish a file whose data is not on disk yet
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _atomic_write(path: Path, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to a temp file beside ``path``, then rename it over ``path``. On any failure
    (including an interrupt) the temp file is removed and ``path`` is untouched."""
    tmp = atomic_temp(path, chunks)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
    """Atomically (re)write a whole JSONL file (write to a temp file, then rename); returns the line count."""
    count = itertools.count()  # zip takes one number per line written, none after the last
    _atomic_write(Path(path), (line for line, _ in zip(jsonl_chunks(records), count)))
    return next(count)


def json_document(obj: Any) -> bytes:
    """What ``write_json`` writes: pretty JSON in UTF-8 (NaN as Python's json writes it: ``NaN``)."""
    return _encode_line(obj, indent=2, sort_keys=False) + b"\n"


def write_json(path: str | Path, obj: Any) -> None:
    """Atomically write ``json_document(obj)``."""
    _atomic_write(Path(path), [json_document(obj)])


def read_json(path: str | Path, *, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A run directory's config / metrics / sweep.json; DsdrError ``FILE: reason`` unless ``read_bytes`` reads it."""
    path = Path(path)
    raw = read_bytes(path, max_bytes=max_bytes)
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise DsdrError(f"{path}: not valid UTF-8 (byte offset {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DsdrError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise DsdrError(f"{path}: invalid JSON ({type(exc).__name__}: {str(exc)[:100]})") from None
