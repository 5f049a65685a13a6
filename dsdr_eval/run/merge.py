"""``dsdr-eval merge SHARD_DIR... --out RUN_DIR``: the shards of one run (``run --shard I/N``) joined into
the run directory the unsharded run would have written.

Checked before anything is written, each refusal one line naming the shard or the field:

1. every SHARD_DIR is a shard (config.json records ``shard``) and their config.json files agree but for
   what differs between the jobs of one array (``PER_SHARD``: the shard, the command, when it was
   made or resumed, the platform string of the node);
2. the shards are 0/N .. N-1/N, each given once;
3. each shard is finished: its samples are exactly the ones its config.json planned (same count, same
   sha256 of the keys), so a shard stopped by its scheduler is named, with what to do;
4. independently of how shards were cut: no sample is in two shards, and together they hold every
   (benchmark, phase, problem, sample_idx) the protocol asks for, of every problem config.json counts.

RUN_DIR then gets config.json (the shards' settings, with ``merged``: each shard's directory, command,
sample count and samples.jsonl sha256) and samples.jsonl (benchmark, phase, problem, sample_idx
order), in one all-or-nothing commit under RUN_DIR's writer lock. The shards' own graded.jsonl and
metrics.json are not carried: ``dsdr-eval score RUN_DIR`` grades the merged samples once, with every
problem's rollouts together (and ``dsdr-eval diversity RUN_DIR`` adds diversity), so the merged run
scores and reports like an unsharded one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.rundir.jsonl import json_document, jsonl_chunks
from dsdr_eval.rundir.samples import Sample, SampleKey, SamplesFile
from dsdr_eval.run.shard import Shard, keys_sha256, recorded_shard

# config.json keys that differ between the shards of one run (a later stage's settings: judge)
PER_SHARD = ("shard", "command", "created", "resumed", "judge")


@dataclass(frozen=True)
class ShardDir:
    path: Path
    config: dict[str, Any]
    shard: Shard
    samples: SamplesFile


def open_shard(path: str | Path) -> ShardDir:
    """A shard's run directory: its config.json (which must record a shard) and samples.jsonl."""
    path = Path(path)
    rundir.require_run_dir(path, rundir.CONFIG)
    rundir.settle(path)
    config = rundir.load_config(path)
    if config.get("kind") != "eval":
        raise DsdrError(f"{path / rundir.CONFIG}: kind={config.get('kind')!r}, not an eval run directory")
    shard = recorded_shard(config)
    if shard is None:
        raise DsdrError(f"{path / rundir.CONFIG}: not a shard (no 'shard' field: made without `run --shard I/N`)")
    samples = SamplesFile.open(path / rundir.SAMPLES, missing_ok=True)
    return ShardDir(path, config, shard, samples)


def comparable(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a shard's config.json every shard of the run must share: all but ``PER_SHARD`` and
    what may differ from node to node without moving an output (where the weights, the data file and
    the compile caches lie, the kernel's name): the model by its fingerprint, the benchmarks and a
    protocol file by their content, as the run identity does (``rundir.identity``)."""
    same = {key: value for key, value in config.items() if key not in PER_SHARD}
    model = same.get("model")
    if isinstance(model, dict) and model.get("fingerprint"):
        same["model"] = {"fingerprint": model["fingerprint"], "revision": model.get("revision")}
    if isinstance(same.get("benchmarks"), list):
        same["benchmarks"] = [{k: b.get(k) for k in ("name", "n_problems", "ids_sha256")} if isinstance(b, dict) else b
                              for b in same["benchmarks"]]
    for key, drop in (("protocol_file", "path"), ("backend", "compile_cache"), ("versions", "platform")):
        if isinstance(same.get(key), dict):
            same[key] = {k: v for k, v in same[key].items() if k != drop}
    return same


def first_difference(a: Any, b: Any, where: str = "") -> tuple[str, Any, Any] | None:
    """The first dotted field where ``a`` and ``b`` differ (``protocol.max_tokens``), with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            found = first_difference(a.get(key), b.get(key), f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{where}.{i}")
            if found is not None:
                return found
        return None
    return None if a == b else (where or "config", a, b)


def check_configs(shards: Sequence[ShardDir]) -> None:
    """Every shard made with the first one's settings and the same shard count (else: the field)."""
    first = shards[0]
    for other in shards[1:]:
        found = first_difference({**comparable(first.config), "shard": {"count": first.shard.count}},
                                 {**comparable(other.config), "shard": {"count": other.shard.count}})
        if found is not None:
            name, was, now = found
            raise DsdrError(f"{other.path / rundir.CONFIG}: {name} is {_short(now)}, {first.path} has {_short(was)}: "
                            "not a shard of the same run (shards differ in --shard and --out only)")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def check_indices(shards: Sequence[ShardDir]) -> None:
    """Shards 0/N .. N-1/N, each once."""
    seen: dict[int, ShardDir] = {}
    for item in shards:
        if item.shard.index in seen:
            raise DsdrError(f"shard {item.shard.spec} given twice: {seen[item.shard.index].path} and {item.path}")
        seen[item.shard.index] = item
    count = shards[0].shard.count
    missing = [f"{i}/{count}" for i in range(count) if i not in seen]
    if missing:
        raise DsdrError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing: give all {count} "
                        f"shard directories (0/{count} .. {count - 1}/{count})")


def check_finished(item: ShardDir) -> None:
    """The shard holds exactly the samples its config.json planned."""
    record, keys = item.config["shard"], item.samples.keys
    planned = record.get("n_samples")
    if planned is not None and record.get("keys_sha256") == keys_sha256(keys):
        return
    where = f"{item.path}: shard {item.shard.spec}"
    if planned is None:
        raise DsdrError(f"{where} is unfinished: its run stopped before generating (rerun its command)")
    if len(keys) < planned:
        raise DsdrError(f"{where} is unfinished: {len(keys)} of its {planned} samples (rerun its command: the "
                        "shard resumes where it stopped)")
    raise DsdrError(f"{where} holds {len(keys)} samples, not the {planned} its config.json planned "
                    "(samples outside its part of the run)")


def check_cover(shards: Sequence[ShardDir], config: dict[str, Any]) -> None:
    """No sample in two shards, and every sample of the run's plan in one (from config.json's protocol
    and benchmark counts, not from how the shards were cut)."""
    owner: dict[SampleKey, ShardDir] = {}
    problems: dict[str, set[str]] = {}
    for item in shards:
        for sample in item.samples.samples:
            if sample.key in owner:
                raise DsdrError(f"{item.path / rundir.SAMPLES}:{sample.line}: sample {tuple(sample.key)} is also in "
                                f"{owner[sample.key].path} (the shards overlap)")
            owner[sample.key] = item
            problems.setdefault(sample.benchmark, set()).add(sample.problem_id)
    counts = {b["name"]: b.get("n_problems") for b in config.get("benchmarks") or []}
    for name in problems:
        if name not in counts:
            raise DsdrError(f"{owner_of(owner, name)}: samples of benchmark {name!r}, which config.json does not list")
    for name, n_problems in counts.items():
        if len(problems.get(name, ())) != n_problems:
            raise DsdrError(f"benchmark {name}: the shards hold samples of {len(problems.get(name, ()))} of its "
                            f"{n_problems} problems: a shard is missing or unfinished")
    phases = [(p["phase"], p["n"]) for p in (config.get("protocol") or {}).get("phases") or []]
    expected = {SampleKey(b, phase, pid, i) for b, ids in problems.items() for phase, n in phases
                for pid in ids for i in range(n)}
    missing, extra = sorted(expected - owner.keys()), sorted(owner.keys() - expected)
    if missing:
        raise DsdrError(f"{len(missing)} samples of the run are in no shard (first: {tuple(missing[0])}): "
                        "a shard is missing or unfinished")
    if extra:
        raise DsdrError(f"{owner[extra[0]].path}: sample {tuple(extra[0])} lies outside the run's protocol "
                        f"({len(extra)} such samples)")


def owner_of(owner: dict[SampleKey, ShardDir], benchmark: str) -> Path:
    return next(item.path for key, item in owner.items() if key.benchmark == benchmark)


def merged_config(shards: Sequence[ShardDir], command: list[str]) -> dict[str, Any]:
    """config.json of the merged run: the shards' settings, the merge command, and each shard's record."""
    config = {k: v for k, v in shards[0].config.items() if k not in PER_SHARD}
    config["command"] = list(command)
    config["merged"] = {"at": rundir.now_iso(), "n_shards": len(shards), "shards": [
        {"path": str(item.path), "shard": item.shard.spec, "command": item.config.get("command"),
         "created": item.config.get("created"), "n_samples": len(item.samples.samples),
         "samples_sha256": item.samples.sha256, "unit": item.config["shard"].get("unit"),
         **({"resumed": item.config["resumed"]} if item.config.get("resumed") else {})} for item in shards]}
    return config


def ordered(shards: Sequence[ShardDir], config: dict[str, Any]) -> list[Sample]:
    """Every sample, in (benchmark, phase, problem, sample_idx) order (problems as the shards first list them)."""
    bench = {b["name"]: i for i, b in enumerate(config.get("benchmarks") or [])}
    phase = {p["phase"]: i for i, p in enumerate((config.get("protocol") or {}).get("phases") or [])}
    first: dict[tuple[str, str], int] = {}
    samples = [s for item in shards for s in item.samples.samples]
    for s in samples:
        first.setdefault((s.benchmark, s.problem_id), len(first))
    return sorted(samples, key=lambda s: (bench.get(s.benchmark, 0), phase.get(s.phase, 0),
                                          first[(s.benchmark, s.problem_id)], s.sample_idx))


def merge_shards(paths: Sequence[str | Path], out: str | Path, *, command: list[str]) -> dict[str, Any]:
    """Check the shards (module docstring) and write their merged run into ``out``; returns its config."""
    out = Path(out)
    shards = sorted((open_shard(p) for p in paths), key=lambda item: item.shard.index)
    for item in shards:
        if item.path.resolve() == out.resolve():
            raise DsdrError(f"--out {out}: is one of the shards; the merged run goes to a directory of its own")
    check_configs(shards)
    check_indices(shards)
    for item in shards:
        check_finished(item)
    config = merged_config(shards, command)
    check_cover(shards, config)
    with rundir.writer_lock(out, command=" ".join(command)):
        taken = [name for name in (rundir.CONFIG, rundir.SAMPLES) if (out / name).exists()]
        if taken:
            raise DsdrError(f"{out}: already holds {' and '.join(taken)}; merge writes a new run directory "
                            "(use another --out)")
        samples = ordered(shards, config)
        try:  # samples.jsonl before config.json: a reader never sees a config without its samples
            rundir.commit_files(out, {rundir.SAMPLES: jsonl_chunks(s.to_json() for s in samples),
                                      rundir.CONFIG: json_document(rundir.stamped_config(config))})
        except OSError as exc:
            raise rundir.commit_failure(out, f"{rundir.SAMPLES} and {rundir.CONFIG}", exc) from None
    return config
