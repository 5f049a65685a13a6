"""``dsdr-eval run --shard I/N``: one of N disjoint parts of a run, each a run directory of its own.

The unit of a shard is what one seed covers, so a shard's samples are the samples the whole run
would write: the backend's ``seed_scope`` says which. ``"request"`` (vLLM: ``SamplingParams.seed``
per request; openai: a seed per rollout): shard I holds every N-th request of the whole plan, in plan
order (benchmark, phase, problem, piece), and packs its own batches from them (batch composition
does not move a per-request seed). ``"batch"`` (hf: one seed per batch, derived from the seeds of
its requests, and the padding of a batch moves its logits): shard I holds every N-th batch of the
whole plan's packing, so every batch, its seed and its padding are those of the unsharded run.
Requests and batches are cut from the *whole* plan, keyed by content (``derive_seed``), so no
shard's position in the array moves a seed.

config.json records the shard (``shard``: index, count, its unit, how many units and samples it
holds of the run's, and the sha256 of its sample keys), which lets a rerun of a finished shard
start no engine and lets ``dsdr-eval merge`` (``dsdr_eval.run.merge``) name an unfinished one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.rundir.samples import SampleKey


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (0-based: Slurm's ``$SLURM_ARRAY_TASK_ID`` of ``--array=0-{count-1}``) of ``count``."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str | None) -> "Shard | None":
        """``"I/N"`` (checked by ``dsdr_eval.options.checks.shard``); None for an unsharded run."""
        if text is None:
            return None
        index, count = (int(part) for part in str(text).split("/"))
        return cls(index, count)

    @property
    def spec(self) -> str:
        return f"{self.index}/{self.count}"

    def units(self, n_units: int) -> list[int]:
        """The positions of this shard's units among ``n_units``: every N-th, from the I-th (round robin
        keeps the shards within one unit of each other and mixes phases and problems in each)."""
        return list(range(self.index, n_units, self.count))


def recorded_shard(config: dict[str, Any] | None) -> Shard | None:
    """The shard a run directory's config.json records (None: an unsharded or merged run)."""
    record = (config or {}).get("shard")
    if not isinstance(record, dict):
        return None
    return Shard(int(record["index"]), int(record["count"]))


def keys_sha256(keys: Iterable[SampleKey]) -> str:
    """A digest of a set of sample keys, independent of their order."""
    digest = hashlib.sha256()
    for key in sorted(tuple(map(str, key)) for key in keys):
        digest.update("\x1f".join(key).encode("utf-8") + b"\n")
    return digest.hexdigest()


def shard_record(shard: Shard, *, unit: str, n_units: int, n_units_run: int, keys: set[SampleKey],
                 n_samples_run: int) -> dict[str, Any]:
    """config.json's ``shard`` of a shard whose units are known (the engine is built)."""
    return {"index": shard.index, "count": shard.count, "unit": unit, "n_units": n_units, "n_units_run": n_units_run,
            "n_samples": len(keys), "n_samples_run": n_samples_run, "keys_sha256": keys_sha256(keys)}


def check_shard_dir(out: Path, old_config: dict[str, Any] | None, shard: Shard | None) -> None:
    """A run directory holds one shard (or an unsharded run) for good: refuse to continue it as another
    (``--force-config`` does not apply: the samples of two shards in one directory are no run)."""
    if old_config is None:
        return
    old = recorded_shard(old_config)
    if old == shard:
        return
    path = rundir.run_path(out, rundir.CONFIG)
    if old is None:
        raise DsdrError(f"{path}: this run directory holds an unsharded run; --shard {shard.spec} writes a "
                        "shard of its own: use another --out")
    if shard is None:
        raise DsdrError(f"{path}: this run directory holds shard {old.spec}; give --shard {old.spec} to resume "
                        f"it, or join the {old.count} shards with `dsdr-eval merge`")
    raise DsdrError(f"{path}: this run directory holds shard {old.spec}, not {shard.spec}: give each shard its "
                    "own --out")


def finished_keys(old_config: dict[str, Any] | None, done: set[SampleKey]) -> set[SampleKey] | None:
    """``done`` (the samples of a shard's directory, within the plan) when they are every sample its
    config.json records: a rerun of a finished shard starts no engine. None otherwise."""
    record = (old_config or {}).get("shard")
    if not isinstance(record, dict) or record.get("n_samples") != len(done):
        return None
    return done if record.get("keys_sha256") == keys_sha256(done) else None


def check_same_units(out: Path, old_config: dict[str, Any] | None, record: dict[str, Any]) -> None:
    """A rerun of a shard must cut the run into the same units as its first run (another --batch-size
    packs other hf batches, so other samples would be this shard's)."""
    old = (old_config or {}).get("shard")
    if not isinstance(old, dict) or "keys_sha256" not in old or old["keys_sha256"] == record["keys_sha256"]:
        return
    raise DsdrError(f"{rundir.run_path(out, rundir.CONFIG)}: shard {old['index']}/{old['count']} was cut into "
                    f"{old['n_units']} units ({old['unit']}) of {old['n_samples']} samples; these settings cut it into "
                    f"{record['n_units']} units ({record['unit']}) of {record['n_samples']} samples (another "
                    "--batch-size or backend?). Rerun with the shard's first settings (config.json's backend)")
