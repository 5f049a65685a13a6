"""Safe, read-only access to a runs directory for the dashboard (no Streamlit import here).

Rules this module enforces (and tests/dashboard/test_dashboard.py checks):

* Every path the dashboard opens is inside the runs directory it was started with. A run named
  in a query parameter (``?run=../../etc``) is resolved (symlinks too) and refused unless the
  result is inside that directory; the same check guards directory discovery, and every file
  read (a ``graded.jsonl`` symlinked to a file outside the runs directory is never opened: it is
  left out of the run's files at discovery, and checked again when it is read).
* Nothing is ever written: files are opened for reading only.
* One malformed or half-written run never breaks the others: every loader returns a `Loaded`
  with either the data or an error message naming the file.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, TypeVar

from dsdr_eval.rundir import sweepdir
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.jsonl import iter_jsonl, iter_jsonl_numbered, read_json
from dsdr_eval.rundir.results import iter_graded, iter_samples, load_run
from dsdr_eval.rundir.samples import SampleKey, parse_key

T = TypeVar("T")
MAX_DEPTH = 4  # runs/<group>/<experiment>/<run> is as deep as the project nests
# HF checkpoints have a config.json too; never mistake them (or caches) for runs.
_SKIP_DIRS = {"checkpoints", "final", "__pycache__", "node_modules", "plots"}
_RUN_FILES = (rundir.CONFIG, rundir.METRICS, rundir.TRAIN_METRICS, rundir.GRADED, rundir.SAMPLES)


class UnsafePath(DsdrError):
    """A requested path is outside the runs directory."""


@dataclass(frozen=True)
class RunEntry:
    name: str  # path relative to the runs root, POSIX separators: the id used in the UI and URLs
    path: Path  # resolved absolute path (inside the root)
    kind: str  # "eval", "train" or "unknown"
    files: frozenset[str]
    label: str
    error: str | None = None  # why config.json could not be read (the run is still listed)
    root: Path | None = None  # the runs directory every file read must stay inside
    refused: frozenset[str] = frozenset()  # files that are symlinks to outside the runs directory
    # the training objective: config.json's "algo" (a training run), or the sweep's training run's
    # (an evaluation run inside a sweep directory); None when the run does not say
    algo: str | None = None

    def has(self, name: str) -> bool:
        return name in self.files

    def file(self, name: str) -> Path:
        """The resolved path of the run's file ``name``; UnsafePath if it lands outside the runs root."""
        return resolve_file(self.root or self.path, self.path / name)


@dataclass(frozen=True)
class Loaded(Generic[T]):
    value: T | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


def runs_root(path: str | Path) -> Path:
    return Path(path).expanduser().resolve()


def resolve_inside(root: Path, name: str) -> Path:
    """The run directory `name` (relative to root) resolved; UnsafePath unless it is inside root."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise UnsafePath(f"invalid run name {name!r}")
    candidate = Path(name)
    if candidate.is_absolute():
        raise UnsafePath(f"run {name!r}: absolute paths are not accepted, only names inside the runs directory")
    resolved = (root / candidate).resolve()
    if not is_inside(root, resolved):
        raise UnsafePath(f"run {name!r} is outside the runs directory {root}")
    return resolved


def is_inside(root: Path, resolved: Path) -> bool:
    """Is the resolved path ``resolved`` the runs directory ``root`` or inside it? (the one containment check)"""
    return resolved == root or root in resolved.parents


def resolve_file(root: Path, path: Path) -> Path:
    """``path`` with every symlink resolved; UnsafePath unless the result is inside ``root``."""
    resolved = Path(path).resolve()
    if resolved == root or not is_inside(root, resolved):  # a file, never the directory itself
        raise UnsafePath(f"{path.name}: refused, it resolves to a file outside the runs directory {root}")
    return resolved


def _classify(path: Path, files: set[str]) -> tuple[str, str, str | None, str | None]:
    """(kind, label, error, algo) of a directory that holds run files."""
    label = path.name
    kind = "unknown"
    error = algo = None
    if rundir.CONFIG in files:
        try:
            config = read_json(path / rundir.CONFIG)
            if isinstance(config, dict):
                kind = str(config.get("kind") or "unknown")
                label = str(config.get("label") or label)
                algo = config.get("algo") if isinstance(config.get("algo"), str) else None
            else:
                error = f"{path / rundir.CONFIG}: expected a JSON object"
        except DsdrError as exc:
            error = str(exc)
    if kind not in ("eval", "train"):
        if rundir.TRAIN_METRICS in files:
            kind = "train"
        elif files & {rundir.METRICS, rundir.GRADED, rundir.SAMPLES}:
            kind = "eval"
    return kind, label, error, algo


def _sweep_algo(root: Path, directory: Path, cache: dict[Path, str | None]) -> str | None:
    """The algorithm of the training run a sweep directory evaluates (its sweep.json), read once per
    sweep; None when ``directory`` is no sweep or the file is unreadable (the sweep panel reports that)."""
    if directory not in cache:
        cache[directory] = None
        path = directory / sweepdir.SWEEP_FILE
        try:
            if path.is_file() and is_inside(root, path.resolve()):
                train_run = read_json(path).get("train_run")
                algo = train_run.get("algo") if isinstance(train_run, dict) else None
                cache[directory] = algo if isinstance(algo, str) else None
        except (DsdrError, OSError, AttributeError):
            pass
    return cache[directory]


def _is_run(files: set[str], path: Path) -> bool:
    if files & {rundir.METRICS, rundir.TRAIN_METRICS, rundir.GRADED, rundir.SAMPLES}:
        return True
    if rundir.CONFIG in files:  # an HF model dir has config.json too, but no "kind"
        try:
            config = json.loads((path / rundir.CONFIG).read_text(encoding="utf-8"))
            return isinstance(config, dict) and "kind" in config
        except (OSError, ValueError):
            return True  # a broken run config: list it so its error is shown
    return False


def discover_runs(root: Path, *, max_depth: int = MAX_DEPTH) -> list[RunEntry]:
    """Every run directory under root (not descending into a run), sorted by name."""
    root = runs_root(root)
    if not root.is_dir():
        return []
    found: list[RunEntry] = []
    sweep_algos: dict[Path, str | None] = {}

    def walk(directory: Path, depth: int) -> None:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        files, refused = set(), set()
        for e in entries:
            if e.is_file():
                try:
                    resolve_file(root, Path(e.path))
                    files.add(e.name)
                except (UnsafePath, OSError):
                    refused.add(e.name)  # a symlink out of the runs directory: never read
        if _is_run(files, directory) or bool(refused & set(_RUN_FILES)):
            # The root itself may be one run (``--runs runs/demo``): it is then named ".".
            kind, label, error, algo = _classify(directory, files)
            if algo is None and kind == "eval":
                algo = _sweep_algo(root, directory.parent, sweep_algos)
            found.append(RunEntry(directory.relative_to(root).as_posix(), directory.resolve(), kind,
                                  frozenset(files & set(_RUN_FILES) | {f for f in files if f.endswith(".jsonl")}),
                                  label, error, root, frozenset(refused), algo))
            return
        if depth >= max_depth:
            return
        for entry in sorted(entries, key=lambda e: e.name):
            if not entry.is_dir() or entry.name.startswith(".") or entry.name in _SKIP_DIRS:
                continue
            if not is_inside(root, Path(entry.path).resolve()):
                continue  # a symlink out of the runs directory: never followed
            walk(Path(entry.path), depth + 1)

    walk(root, 0)
    # Names are the un-resolved relative paths (a symlinked run keeps its link name); the stored
    # path is resolved and was checked to be inside root.
    return sorted(found, key=lambda r: r.name)


def sweep_members(sweep_dir: Path, runs: list[RunEntry]) -> list[RunEntry]:
    """The evaluation runs inside ``sweep_dir`` and the training run its sweep.json names (when that run
    is in ``runs``: the path is recorded as the sweep command was given it, so it is tried as written and
    from the working directory)."""
    members = [entry for entry in runs if entry.kind == "eval" and entry.path.parent == sweep_dir]
    try:
        train_run = read_json(sweep_dir / sweepdir.SWEEP_FILE).get("train_run")
        recorded = Path(str(train_run.get("path"))).resolve() if isinstance(train_run, dict) else None
    except (DsdrError, OSError, AttributeError):
        recorded = None
    return [*(entry for entry in runs if entry.kind == "train" and entry.path == recorded), *members]


# What a first look compares when no run is requested: the method and its baseline, the paper's main
# comparison (docs/ALGORITHMS.md; Table 1's DSDR vs GRPO rows), not the first runs by name (an ablation
# study's names start with dapo/, darling/).
DEFAULT_COMPARISON = ("dsdr", "grpo")


def named_algo(name: str) -> str | None:
    """The training algorithm a run's name spells (``ablation/grpo/s0/sweep/final_eval``, ``grpo-s1``,
    ``dsdr_wo_gd_s0``), for runs whose files record none (an evaluation of a checkpoint made elsewhere);
    None when no part of the name is one."""
    from dsdr_train.config import ALGOS  # the trainer's names; config is a light module (no torch)

    for part in re.split(r"[/\s-]+", name.lower()):
        for algo in sorted(ALGOS, key=len, reverse=True):  # dsdr_wo_gd before dsdr
            if part == algo or re.fullmatch(re.escape(algo) + r"_s?\d+", part):
                return algo
    return None


def default_selection(names: list[str], algos: dict[str, str | None], count: int = 4) -> list[str]:
    """Names to preselect: when runs of every algorithm of DEFAULT_COMPARISON are there, up to ``count`` of
    them, taking each algorithm's runs in turn (in ``names`` order: lowest seed first), so the method and its
    baseline are side by side; else one run per algorithm when the runs say theirs; else the first ``count``."""
    by_algo: dict[str, list[str]] = {}
    for name in names:
        algo = algos.get(name) or named_algo(name)
        if algo is not None:
            by_algo.setdefault(algo, []).append(name)
    if all(algo in by_algo for algo in DEFAULT_COMPARISON):
        turns = itertools.zip_longest(*(by_algo[algo] for algo in DEFAULT_COMPARISON))
        return [name for turn in turns for name in turn if name is not None][:count]
    if len(by_algo) > 1:
        return [runs[0] for runs in by_algo.values()][:count]
    return names[:count]


# the kind of run each page shows, in the sidebar's order
PAGE_KINDS = {"training": "train", "evaluation": "eval", "samples": "eval"}


def landing_page(runs: list[RunEntry]) -> str:
    """The first page (sidebar order) with runs to show, so ``dsdr-dashboard`` never opens on an empty
    page when another has content (an evaluation-only directory lands on "evaluation");
    "training" when there are no runs at all (its page says how to start one)."""
    kinds = {entry.kind for entry in runs}
    return next((page for page, kind in PAGE_KINDS.items() if kind in kinds), "training")


def file_stamp(path: Path) -> tuple[int, int, int, int]:
    """(mtime_ns, size) of the file itself (links not followed) and of what it resolves to: the
    cache key that changes when a run writes more or a file is swapped for a link."""
    stamp: list[int] = []
    for stat in (path.lstat, path.stat):
        try:
            st = stat()
            stamp += [st.st_mtime_ns, st.st_size]
        except OSError:
            stamp += [0, -1]
    return stamp[0], stamp[1], stamp[2], stamp[3]


def load_results(entry: RunEntry) -> Loaded:
    """The run's RunResults (``dsdr_eval.rundir.results.load_run``: what `dsdr-eval report` reads) or the
    reason it cannot be shown."""
    if not entry.has(rundir.METRICS):
        what = "samples.jsonl only: not scored yet (run `dsdr-eval score " + entry.name + "`)" \
            if entry.has(rundir.SAMPLES) else "no metrics.json"
        if rundir.METRICS in entry.refused:
            what = "metrics.json refused: it resolves to a file outside the runs directory"
        return Loaded(error=f"{entry.name}: {what}")
    try:
        for name in (rundir.METRICS, rundir.CONFIG, rundir.GRADED):  # every file the loader may open
            if (entry.path / name).exists() or (entry.path / name).is_symlink():
                entry.file(name)
        return Loaded(load_run(entry.path, label=entry.label))
    except DsdrError as exc:
        return Loaded(error=f"{entry.name}: {exc}")
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        return Loaded(error=f"{entry.name}: malformed run ({type(exc).__name__}: {exc})")


# A run's sample files, read as typed records by the one sample schema (dsdr_eval.rundir.samples).
_TYPED_READERS = {rundir.GRADED: iter_graded, rundir.SAMPLES: iter_samples}
# diversity_per_sample.jsonl: its key and per-sample labels, not measures
_DIVERSITY_NON_MEASURES = {"benchmark", "problem_id", "sample_idx", "phase", "correct", "answer_class"}


def _load(entry: RunEntry, name: str, read: Callable[[Path, Callable[[str], None]], tuple[Any, list[str]]]) -> Loaded:
    """``read(resolved path, on_partial_tail) -> (value, warnings)`` on the run's file ``name``
    (refused outside the runs root); its errors, and a skipped partial last line, as a Loaded."""
    path = entry.path / name
    try:
        resolved = entry.file(name)
    except UnsafePath as exc:
        return Loaded(error=f"{entry.name}/{exc}")
    skipped_tail: list[str] = []  # the reader's own warning, shown as a note instead of on stderr
    try:
        value, warnings = read(resolved, skipped_tail.append)
    except DsdrError as exc:
        return Loaded(error=str(exc))
    except OSError as exc:
        return Loaded(error=f"{path}: {exc}")
    if skipped_tail:
        warnings.append(f"{path.parent.name}/{path.name}: the last line is incomplete (still being written); skipped")
    return Loaded(value, warnings=warnings)


def load_jsonl(entry: RunEntry, name: str, *, limit: int | None = None) -> Loaded:
    """Rows of the run's JSONL file ``name`` (at most ``limit``): graded.jsonl and samples.jsonl as
    typed records (GradedSample / Sample, validated by dsdr_eval.rundir.samples: an invalid line is the
    error, FILE:LINE:FIELD), any other file as dicts. A run still being written may end in a
    partial line (skipped, with a note)."""
    def read(path: Path, on_partial_tail: Callable[[str], None]) -> tuple[list[Any], list[str]]:
        warnings: list[str] = []
        typed = _TYPED_READERS.get(name)
        rows: Iterator[Any] = (typed(path, on_warning=warnings.append, on_partial_tail=on_partial_tail) if typed
                               else iter_jsonl(path, tolerate_truncated_tail=True, on_warning=on_partial_tail))
        kept = list(itertools.islice(rows, limit))
        if limit is not None and len(kept) >= limit:
            warnings.append(f"showing the first {limit} lines of {name}")
        return kept, warnings

    return _load(entry, name, read)


def load_diversity_index(entry: RunEntry) -> Loaded:
    """diversity_per_sample.jsonl (``dsdr-eval diversity``) as {SampleKey: {measure: value}}, keyed
    as the run's samples are (``dsdr_eval.rundir.samples.parse_key``: a bad key is the error, FILE:LINE:FIELD)."""
    def read(path: Path, on_partial_tail: Callable[[str], None]) -> tuple[dict[SampleKey, dict[str, float]], list[str]]:
        index = {}
        for lineno, row in iter_jsonl_numbered(path, tolerate_truncated_tail=True, on_warning=on_partial_tail):
            index[parse_key(row, f"{path}:{lineno}")] = {
                k: v for k, v in row.items() if k not in _DIVERSITY_NON_MEASURES
                and isinstance(v, (int, float)) and not isinstance(v, bool)}
        return index, []

    return _load(entry, rundir.DIVERSITY_PER_SAMPLE, read)
