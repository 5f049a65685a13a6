"""Accuracy metrics over graded samples, with 95 % bootstrap confidence intervals over problems.

Definitions (docs/ALGORITHMS.md §5, DSDR paper Table 1 / Table 3):

* ``pass@k`` -- unbiased estimator of Chen et al. (2021), mean over problems of
  ``1 - C(n-c, k) / C(n, k)`` computed as ``1 - prod_{i=n-c+1..n} (1 - k/i)`` (1.0 when n-c < k),
  from the "sampling" phase; k = every power of two (1, 2, 4, ...) up to the smallest number of
  samples any problem has (:func:`k_values`: 64 for dsdr-paper, 256 for darling-paper, whose
  pass@1 and pass@128 are two of them). pass@1 is the mean correctness of the samples, the DARLING
  paper's pass@1.
* ``avg@n`` -- mean over problems of the fraction of correct samples (all n "sampling" samples).
* ``avg@16`` / ``avg@64`` -- the same over the first 16 / 64 samples of each problem by
  ``sample_idx`` (reported only when every problem has that many).
* ``pass1`` -- the paper's Pass@1: correctness of the single low-temperature rollout ("pass1"
  phase; the mean if a problem has several), reported only when that phase is present.
* ``maj@k`` -- for the same k, majority vote over the first k "sampling" samples (by ``sample_idx``) on their
  math-equivalence ``answer_class``; samples without an answer do not vote; a tie is broken in
  favour of the class that appears first among those k samples; 0 when none of them has an
  answer. A problem scores 1 when the winning class is correct.
* ``average`` -- the unweighted (macro) mean over benchmarks of each metric present in all of
  them, as in Table 1's "Average" column; its CI comes from a stratified bootstrap (problems
  resampled within each benchmark). ``average.benchmarks`` lists the benchmarks averaged; when a
  file holds Table 1's five benchmarks plus others (amc23), ``average_table1`` is the mean over
  exactly those five.

CIs: percentile bootstrap over problems (``bootstrap`` replicates). Each benchmark resamples its
problems from its own random stream, derived from (seed, benchmark name) by
:func:`bootstrap_indices` (numpy ``SeedSequence`` of the seed, a SHA-256 key of the name and the
number of problems; never Python's salted ``hash()``), so two benchmarks of equal size are
resampled independently, the stratified CI of the average is built from independent strata, and
a benchmark's CI does not depend on which other benchmarks are in the file. Every metric of a
benchmark uses the same resampled problem indices. The paired comparison
(``dsdr_eval.reporting.compare``) uses the same implementation (:func:`stratified_bootstrap_means`).
"""

from __future__ import annotations

import functools
import hashlib
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Iterable, Iterator

import numpy as np

from dsdr_eval.errors import DsdrError
from dsdr_eval.grading import status_counts
from dsdr_eval.grading.grade import ANSWER_RULES
from dsdr_eval.grading.reasoning import NO_REASONING, UNCLOSED
from dsdr_eval.rundir.samples import PASS1, SAMPLING, GradedSample, as_graded

AVG_AT = (16, 64)
TABLE1_BENCHMARKS = ("aime24", "aime25", "math500", "minerva", "olympiadbench")  # DSDR paper Table 1


def k_values(n_min: int) -> tuple[int, ...]:
    """The k of pass@k / maj@k for a benchmark whose problems have at least ``n_min`` samples: every
    power of two <= n_min (a k is reported only when every problem has >= k samples)."""
    return tuple(1 << e for e in range(n_min.bit_length())) if n_min >= 1 else ()


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for n samples with c correct (Chen et al. 2021, product form; docs/ALGORITHMS.md §5, Eq. 18)."""
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def majority_correct(classes: list[int | None], correct: list[bool]) -> bool:
    """maj@k of one problem given its first k samples' answer classes and correctness."""
    votes: dict[int, int] = {}
    first_seen: dict[int, int] = {}
    class_correct: dict[int, bool] = {}
    for position, (cls, ok) in enumerate(zip(classes, correct)):
        if cls is None:
            continue
        votes[cls] = votes.get(cls, 0) + 1
        first_seen.setdefault(cls, position)
        class_correct[cls] = class_correct.get(cls, False) or bool(ok)
    if not votes:
        return False
    winner = min(votes, key=lambda cls: (-votes[cls], first_seen[cls]))
    return class_correct[winner]


Grouped = dict[str, dict[str, dict[str, list[GradedSample]]]]


def iter_by_problem(records: Iterable[Any]) -> Iterator[tuple[tuple[str, str, str], list[Any]]]:
    """((benchmark, phase, problem_id), records sorted by sample_idx) in order of first appearance."""
    groups: dict[tuple[str, str, str], list[Any]] = {}
    for record in records:
        groups.setdefault(record.key[:3], []).append(record)
    for group, members in groups.items():
        yield group, sorted(members, key=lambda r: r.key.sample_idx)


def _group(records: Iterable[GradedSample]) -> Grouped:
    """benchmark -> phase -> problem_id -> records sorted by sample_idx."""
    grouped: Grouped = defaultdict(lambda: defaultdict(dict))
    for (benchmark, phase, problem_id), members in iter_by_problem(records):
        grouped[benchmark][phase][problem_id] = members
    return grouped


def _per_problem_values(phases: dict[str, dict[str, list[GradedSample]]]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Per-problem metric vectors ("pass@4" -> array [P]; avg@n = c/n, docs/ALGORITHMS.md §5, Eq. 19)
    and the benchmark's descriptive fields."""
    values: dict[str, np.ndarray] = {}
    info: dict[str, Any] = {}
    sampling = phases.get(SAMPLING, {})
    if sampling:
        problems = list(sampling.values())
        n = np.array([len(p) for p in problems])
        c = np.array([sum(r.correct for r in p) for p in problems])
        n_min = int(n.min())
        info["n_samples_per_problem"] = n_min
        if int(n.max()) != n_min:
            info["n_samples_per_problem_max"] = int(n.max())
        values["avg@n"] = c / n
        for k in AVG_AT:
            if n_min >= k:
                values[f"avg@{k}"] = np.array([np.mean([r.correct for r in p[:k]]) for p in problems])
        for k in k_values(n_min):
            values[f"pass@{k}"] = np.array([pass_at_k(int(ni), int(ci), k) for ni, ci in zip(n, c)])
            values[f"maj@{k}"] = np.array([
                float(majority_correct([r.answer_class for r in p[:k]], [r.correct for r in p[:k]]))
                for p in problems])
    pass1 = phases.get(PASS1, {})
    if pass1:
        values["pass1"] = np.array([np.mean([r.correct for r in p]) for p in pass1.values()])
    all_ids = set(sampling) | set(pass1)
    info["n_problems"] = len(all_ids)
    if sampling and pass1 and set(sampling) != set(pass1):
        info["n_problems_pass1"] = len(pass1)
    return values, info


BOOTSTRAP_STREAMS = ("numpy default_rng(SeedSequence([seed, sha256(stratum name)[:8] as little-endian uint64, "
                     "n_problems])) per stratum (benchmark); indices = rng.integers(0, n, (bootstrap, n))")


def stratum_key(name: str) -> int:
    """A stable 64-bit key of a stratum (benchmark) name: the same in every process and Python."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()[:8], "little")


@functools.lru_cache(maxsize=64)
def bootstrap_indices(seed: int, stratum: str, n_items: int, n_boot: int) -> np.ndarray:
    """Resampled item indices of one stratum: int64 [n_boot, n_items] (read-only), drawn with
    replacement from the stream of (seed, stratum, n_items); see :data:`BOOTSTRAP_STREAMS`."""
    if seed < 0:
        raise DsdrError(f"bootstrap seed must be >= 0 (got {seed})")
    rng = np.random.default_rng(np.random.SeedSequence([seed, stratum_key(stratum), n_items]))
    index = rng.integers(0, n_items, size=(n_boot, n_items))
    index.flags.writeable = False
    return index


def stratified_bootstrap_means(strata: Mapping[str, np.ndarray], *, n_boot: int, seed: int = 0,
                               rng: np.random.Generator | None = None) -> np.ndarray:
    """Bootstrap replicates [n_boot] of the unweighted mean over strata of each stratum's mean.

    strata: stratum name -> per-item values [n_items] (the problems of one benchmark). Items are
    resampled with replacement within each stratum, from that stratum's own stream
    (:func:`bootstrap_indices` of (seed, name)): independent strata, and a stratum's resamples do
    not depend on the other strata. ``rng`` instead draws every stratum's indices from that one
    generator, in order."""
    if not strata:
        raise ValueError("stratified_bootstrap_means needs at least one stratum")
    total = np.zeros(n_boot)
    for name, values in strata.items():
        values = np.asarray(values, dtype=np.float64)
        index = (bootstrap_indices(seed, name, len(values), n_boot) if rng is None
                 else rng.integers(0, len(values), size=(n_boot, len(values))))
        total += values[index].mean(axis=1)
    return total / len(strata)


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """{"pass@4": x, "avg@16": y} -> {"pass@k": {"4": x}, "avg@16": y} (the metrics.json shape)."""
    nested: dict[str, Any] = {}
    for key in ("pass1", "avg@n", *(f"avg@{k}" for k in AVG_AT)):
        if key in flat:
            nested[key] = flat[key]
    for family in ("pass", "maj"):
        ks = {key.split("@")[1]: value for key, value in flat.items() if key.startswith(f"{family}@")}
        if ks:
            nested[f"{family}@k"] = dict(sorted(ks.items(), key=lambda kv: int(kv[0])))
    return nested


def compute_metrics(graded: Iterable[GradedSample | Mapping[str, Any]], *, bootstrap: int = 1000,
                    seed: int = 0) -> dict:
    """metrics.json content (without grading provenance) from graded records (graded.jsonl rows as
    dicts are checked like the file's lines: ``samples.as_graded``); see module docstring."""
    if bootstrap < 0:
        raise DsdrError(f"--bootstrap must be >= 0 (got {bootstrap})")
    grouped = _group(as_graded(graded))
    benchmarks: dict[str, Any] = {}
    replicates: dict[str, dict[str, np.ndarray]] = {}
    for name in sorted(grouped):
        phases = grouped[name]
        values, info = _per_problem_values(phases)
        point = {key: float(vector.mean()) for key, vector in values.items()}
        ci: dict[str, list[float]] = {}
        replicates[name] = {}
        if bootstrap > 0:
            for key, vector in values.items():
                means = stratified_bootstrap_means({name: vector}, n_boot=bootstrap, seed=seed)
                replicates[name][key] = means
                lo, hi = np.percentile(means, [2.5, 97.5])
                ci[key] = [float(lo), float(hi)]
        rows = [r for problems in phases.values() for p in problems.values() for r in p]
        entry: dict[str, Any] = {"n_problems": info["n_problems"]}
        entry.update({k: v for k, v in info.items() if k != "n_problems"})
        entry.update(_nest(point))
        entry["ci95"] = _nest(ci)
        entry["status_counts"] = _status_counts(rows)
        entry["status_counts_by_phase"] = {phase: _status_counts(r for p in problems.values() for r in p)
                                           for phase, problems in sorted(phases.items())}
        entry["mean_completion_tokens"] = _mean_of([r.sample.n_completion_tokens for r in rows])
        reasons = [r.sample.finish_reason for r in rows if r.sample.finish_reason is not None]
        entry["truncated_fraction"] = sum(reason == "length" for reason in reasons) / len(reasons) if reasons else None
        entry.update(reasoning_summary(rows))
        benchmarks[name] = entry
    result = {"benchmarks": benchmarks, "average": _macro_average(benchmarks, replicates, bootstrap),
            "provenance": {"pass@k": "unbiased estimator (Chen et al. 2021), 1 - prod_{i=n-c+1..n}(1 - k/i)",
                           "maj@k": "majority vote over the first k samples by sample_idx on answer_class; "
                                    "no-answer samples do not vote; ties -> class seen first",
                           "ci95": "percentile bootstrap over problems", "bootstrap": bootstrap, "seed": seed,
                           "bootstrap_streams": BOOTSTRAP_STREAMS,
                           "average": "unweighted mean over benchmarks (stratified bootstrap for its CI)"}}
    if set(TABLE1_BENCHMARKS) < set(benchmarks):
        # Table 1's "Average" is over exactly these five; other benchmarks (amc23) would shift it.
        result["average_table1"] = _macro_average({n: benchmarks[n] for n in TABLE1_BENCHMARKS}, replicates, bootstrap)
    return result


def _macro_average(benchmarks: dict[str, Any], replicates: dict[str, dict[str, np.ndarray]], bootstrap: int) -> dict:
    """The unweighted mean over benchmarks of each metric (docs/ALGORITHMS.md §5, Eq. 20), with its CI."""
    if not benchmarks:
        return {}
    names = list(benchmarks)
    flat_sets = [set(replicates[n]) if bootstrap > 0 else set() for n in names]
    point_flat: dict[str, list[float]] = defaultdict(list)
    for name in names:
        entry = benchmarks[name]
        for key in ("pass1", "avg@n", *(f"avg@{k}" for k in AVG_AT)):
            if key in entry:
                point_flat[key].append(entry[key])
        for family in ("pass", "maj"):
            for k, value in entry.get(f"{family}@k", {}).items():
                point_flat[f"{family}@{k}"].append(value)
    common = {key: float(np.mean(vals)) for key, vals in point_flat.items() if len(vals) == len(names)}
    average = _nest(common)
    if bootstrap > 0:
        ci = {}
        for key in common:
            if all(key in s for s in flat_sets):
                # = stratified_bootstrap_means over these benchmarks: their replicates, averaged
                means = np.mean([replicates[n][key] for n in names], axis=0)
                lo, hi = np.percentile(means, [2.5, 97.5])
                ci[key] = [float(lo), float(hi)]
        average["ci95"] = _nest(ci)
    average["benchmarks"] = names
    return average


def _status_counts(records: Iterable[GradedSample]) -> dict[str, int]:
    return status_counts({"status": r.status} for r in records)


def reasoning_summary(rows: list[GradedSample]) -> dict[str, Any]:
    """Thinking-model figures of one benchmark (issue 33): the share of samples whose reasoning never
    closed (over the samples graded with a reasoning state), the mean reasoning and answer tokens
    (reasoning: ``n_reasoning_tokens``, 0 for a sample with no reasoning; answer: the completion's
    tokens less those; null unless known for every sample: a mean over the samples that happen to
    have counts -- e.g. only those without reasoning -- would be biased), and how many extracted
    answers each grading rule changed from the whole completion's (``changed_by``)."""
    states = [r.reasoning_state for r in rows if r.reasoning_state is not None]
    reasoning_tokens = [r.sample.n_reasoning_tokens if r.sample.n_reasoning_tokens is not None
                        else 0 if r.reasoning_state == NO_REASONING else None for r in rows]
    answer_tokens = [None if n is None or r.sample.n_completion_tokens is None else r.sample.n_completion_tokens - n
                     for r, n in zip(rows, reasoning_tokens)]
    changed = {rule: sum(rule in (r.changed_by or ()) for r in rows) for rule in ANSWER_RULES}
    return {"unclosed_reasoning_fraction": sum(s == UNCLOSED for s in states) / len(states) if states else None,
            "mean_reasoning_tokens": _mean_of_all(reasoning_tokens), "mean_answer_tokens": _mean_of_all(answer_tokens),
            "answers_changed_by_rule": changed}


def _mean_of_all(values: list[int | None]) -> float | None:
    """The mean when every value is known, else None."""
    return float(np.mean(values)) if values and all(v is not None for v in values) else None


def _mean_of(values: list[int | None]) -> float | None:
    present = [v for v in values if v is not None]  # null = not recorded
    return float(np.mean(present)) if present else None
