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
from typing import Any, Iterable, Iterator, NamedTuple

import numpy as np

from dsdr_eval.scoring.budget_curve import PROVENANCE as BUDGET_CURVE_PROVENANCE
from dsdr_eval.scoring.budget_curve import BudgetCurveTally
from dsdr_eval.scoring.budget_curve import Estimators as BudgetEstimators
from dsdr_eval.errors import DsdrError
from dsdr_eval.grading import STATUSES
from dsdr_eval.grading.grade import ANSWER_RULES
from dsdr_eval.grading.audit import FLAGS as AUDIT_FLAGS
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


def iter_by_problem(records: Iterable[Any]) -> Iterator[tuple[tuple[str, str, str], list[Any]]]:
    """((benchmark, phase, problem_id), records sorted by sample_idx) in order of first appearance."""
    groups: dict[tuple[str, str, str], list[Any]] = {}
    for record in records:
        groups.setdefault(record.key[:3], []).append(record)
    for group, members in groups.items():
        yield group, sorted(members, key=lambda r: r.key.sample_idx)


class _Sampled(NamedTuple):
    """One problem's "sampling" rollouts, reduced to what the metrics need (its texts are gone)."""

    problem_id: str
    n: int
    c: int
    avg_at: dict[int, float]  # k -> mean correctness of the first k rollouts (AVG_AT, k <= n)
    maj_at: dict[int, float]  # k -> maj@k (every k of k_values(n))


class _BenchmarkTally:
    """One benchmark's streamed aggregates: a few numbers per problem and counters per benchmark,
    so the metrics of a run are computed without holding its records (issue 36)."""

    def __init__(self, count_tokens: TokenCounter | None = None) -> None:
        self.count_tokens = count_tokens  # counts the reasoning of samples that carry no count (None: none known)
        self.uncounted = [0, 0]  # samples reasoning without a count; samples without a completion count
        self.sampling: dict[int, _Sampled] = {}  # keyed by first position: order of first appearance
        self.pass1: dict[int, tuple[str, float]] = {}
        self.phase_first: dict[str, int] = {}
        self.status: dict[str, dict[str, int]] = {}  # phase -> status -> count
        # (a status outside STATUSES, phase) -> (position, sample_idx) where first seen
        self.status_first: dict[tuple[str, str], tuple[int, int]] = {}
        self.n_rows = 0
        self.tokens = [0, 0]  # sum, count of the recorded n_completion_tokens
        self.reasons = [0, 0]  # finish_reason "length", recorded finish_reasons
        self.states = [0, 0]  # unclosed, graded with a reasoning state
        self.reasoning_tokens: list[int] | None = [0]  # sum; None once a sample's count is unknown
        self.answer_tokens: list[int] | None = [0]
        self.changed = {rule: 0 for rule in ANSWER_RULES}
        self.audit = dict.fromkeys(AUDIT_FLAGS, 0)  # issue 43: samples raising each flag
        self.audited = [0, 0]  # samples with any flag, samples audited (graded.jsonl with an audit)
        self.curve = BudgetCurveTally()  # accuracy against token budget (dsdr_eval.scoring.budget_curve)

    def add(self, position: int, phase: str, members: list[GradedSample]) -> None:
        problem_id = members[0].key.problem_id
        self.phase_first[phase] = min(self.phase_first.get(phase, position), position)
        self.curve.add(position, phase, members)
        if phase == SAMPLING:
            correct = [r.correct for r in members]
            self.sampling[position] = _Sampled(
                problem_id, len(members), sum(correct),
                {k: float(np.mean(correct[:k])) for k in AVG_AT if len(members) >= k},
                {k: float(majority_correct([r.answer_class for r in members[:k]], correct[:k]))
                 for k in k_values(len(members))})
        elif phase == PASS1:
            self.pass1[position] = (problem_id, float(np.mean([r.correct for r in members])))
        counts = self.status.setdefault(phase, {})
        for record in members:
            counts[record.status] = counts.get(record.status, 0) + 1
            if record.status not in STATUSES:
                where = (position, record.key.sample_idx)
                self.status_first[record.status, phase] = min(self.status_first.get((record.status, phase), where),
                                                              where)
            self._add_row(record)

    def _add_row(self, r: GradedSample) -> None:
        self.n_rows += 1
        if r.sample.n_completion_tokens is not None:
            self.tokens[0] += r.sample.n_completion_tokens
            self.tokens[1] += 1
        if r.sample.finish_reason is not None:
            self.reasons[0] += r.sample.finish_reason == "length"
            self.reasons[1] += 1
        if r.reasoning_state is not None:
            self.states[0] += r.reasoning_state == UNCLOSED
            self.states[1] += 1
        n = (r.sample.n_reasoning_tokens if r.sample.n_reasoning_tokens is not None
             else 0 if r.reasoning_state == NO_REASONING else None)
        answer = None if n is None or r.sample.n_completion_tokens is None else r.sample.n_completion_tokens - n
        if n is None and r.reasoning_state is not None:  # reasoned, no count recorded: the model's tokenizer counts
            n, answer = _counted(r, self.count_tokens) if self.count_tokens is not None else (None, None)
            self.uncounted[0] += n is None
        elif answer is None and n is not None:
            self.uncounted[1] += 1
        for total, value in ((self.reasoning_tokens, n), (self.answer_tokens, answer)):
            if total is not None and value is not None:
                total[0] += value
        if n is None:
            self.reasoning_tokens = None
        if answer is None:
            self.answer_tokens = None
        for rule in r.changed_by or ():
            if rule in self.changed:
                self.changed[rule] += 1
        if r.audit is not None:
            self.audited[0] += bool(r.audit)
            self.audited[1] += 1
            for flag in r.audit:
                self.audit[flag] = self.audit.get(flag, 0) + 1

    def status_counts(self, phases: Iterable[str]) -> dict[str, int]:
        """Counts over ``phases``: every status of STATUSES, then any other in the order the records are
        listed (phase, then problem, by first appearance; then sample_idx), as ``grading.status_counts``."""
        counts = {status: 0 for status in STATUSES}
        first: dict[str, tuple[int, int, int]] = {}
        for (status, phase), (position, sample_idx) in self.status_first.items():
            if phase in phases:
                where = (self.phase_first[phase], position, sample_idx)
                first[status] = min(first.get(status, where), where)
        counts.update((status, 0) for status in sorted(first, key=first.__getitem__))
        for phase in phases:
            for status, n in self.status.get(phase, {}).items():
                counts[status] += n
        return counts


class MetricsAccumulator:
    """``compute_metrics`` fed one problem at a time: ``add`` each (benchmark, phase, problem_id) group
    (records sorted by sample_idx, with the position of its first record in the file), then ``result``.
    What it holds grows with the number of problems, not with the samples' texts."""

    def __init__(self, count_tokens: TokenCounter | None = None) -> None:
        self.benchmarks: dict[str, _BenchmarkTally] = {}
        self.count_tokens = count_tokens  # the model's tokenizer, for reasoning without a recorded count

    def add(self, position: int, members: list[GradedSample]) -> None:
        benchmark, phase, _ = members[0].key[:3]
        self.benchmarks.setdefault(benchmark, _BenchmarkTally(self.count_tokens)).add(position, phase, members)

    def result(self, *, bootstrap: int = 1000, seed: int = 0) -> dict:
        """metrics.json content (without grading provenance); see the module docstring."""
        if bootstrap < 0:
            raise DsdrError(f"--bootstrap must be >= 0 (got {bootstrap})")
        benchmarks: dict[str, Any] = {}
        replicates: dict[str, dict[str, np.ndarray]] = {}
        for name in sorted(self.benchmarks):
            benchmarks[name], replicates[name] = _benchmark_entry(name, self.benchmarks[name], bootstrap, seed)
        return _result(benchmarks, replicates, bootstrap, seed)


def _per_problem_values(tally: _BenchmarkTally) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Per-problem metric vectors ("pass@4" -> array [P]; avg@n = c/n, docs/ALGORITHMS.md §5, Eq. 19)
    and the benchmark's descriptive fields."""
    values: dict[str, np.ndarray] = {}
    info: dict[str, Any] = {}
    sampling = [tally.sampling[p] for p in sorted(tally.sampling)]
    pass1 = [tally.pass1[p] for p in sorted(tally.pass1)]
    if sampling:
        n = np.array([p.n for p in sampling])
        c = np.array([p.c for p in sampling])
        n_min = int(n.min())
        info["n_samples_per_problem"] = n_min
        if int(n.max()) != n_min:
            info["n_samples_per_problem_max"] = int(n.max())
        values["avg@n"] = c / n
        for k in AVG_AT:
            if n_min >= k:
                values[f"avg@{k}"] = np.array([p.avg_at[k] for p in sampling])
        for k in k_values(n_min):
            values[f"pass@{k}"] = np.array([pass_at_k(int(ni), int(ci), k) for ni, ci in zip(n, c)])
            values[f"maj@{k}"] = np.array([p.maj_at[k] for p in sampling])
    if pass1:
        values["pass1"] = np.array([value for _, value in pass1])
    sampling_ids, pass1_ids = {p.problem_id for p in sampling}, {problem_id for problem_id, _ in pass1}
    info["n_problems"] = len(sampling_ids | pass1_ids)
    if sampling and pass1 and sampling_ids != pass1_ids:
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
    accumulator = MetricsAccumulator()
    for position, (_, members) in enumerate(iter_by_problem(as_graded(graded))):
        accumulator.add(position, members)
    return accumulator.result(bootstrap=bootstrap, seed=seed)


def _benchmark_entry(name: str, tally: _BenchmarkTally, bootstrap: int,
                     seed: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One benchmark's metrics.json entry and its bootstrap replicates (for the macro average's CI)."""
    values, info = _per_problem_values(tally)
    point = {key: float(vector.mean()) for key, vector in values.items()}
    ci: dict[str, list[float]] = {}
    replicates: dict[str, np.ndarray] = {}
    if bootstrap > 0:
        for key, vector in values.items():
            means = stratified_bootstrap_means({name: vector}, n_boot=bootstrap, seed=seed)
            replicates[key] = means
            lo, hi = np.percentile(means, [2.5, 97.5])
            ci[key] = [float(lo), float(hi)]
    phases = sorted(tally.phase_first, key=tally.phase_first.__getitem__)  # order of first appearance
    entry: dict[str, Any] = {"n_problems": info["n_problems"]}
    entry.update({k: v for k, v in info.items() if k != "n_problems"})
    entry.update(_nest(point))
    entry["ci95"] = _nest(ci)
    entry["status_counts"] = tally.status_counts(phases)
    entry["status_counts_by_phase"] = {phase: tally.status_counts([phase]) for phase in sorted(phases)}
    entry["mean_completion_tokens"] = tally.tokens[0] / tally.tokens[1] if tally.tokens[1] else None
    entry["truncated_fraction"] = tally.reasons[0] / tally.reasons[1] if tally.reasons[1] else None
    entry.update(reasoning_summary(tally))
    # issue 43: samples raising each audit flag (doubts for a person, never a verdict); null when the
    # graded records carry no audit (a graded.jsonl written before it)
    entry["audit_counts"] = dict(tally.audit) if tally.audited[1] else None
    entry["audit_flagged"] = tally.audited[0] if tally.audited[1] else None
    entry.update(tally.curve.entries(BudgetEstimators(k_values, pass_at_k, majority_correct)))
    return entry, replicates


def _result(benchmarks: dict[str, Any], replicates: dict[str, dict[str, np.ndarray]], bootstrap: int,
            seed: int) -> dict:
    result = {"benchmarks": benchmarks, "average": _macro_average(benchmarks, replicates, bootstrap),
              "provenance": {"pass@k": "unbiased estimator (Chen et al. 2021), 1 - prod_{i=n-c+1..n}(1 - k/i)",
                             "maj@k": "majority vote over the first k samples by sample_idx on answer_class; "
                                      "no-answer samples do not vote; ties -> class seen first",
                             "ci95": "percentile bootstrap over problems", "bootstrap": bootstrap, "seed": seed,
                             "bootstrap_streams": BOOTSTRAP_STREAMS,
                             "average": "unweighted mean over benchmarks (stratified bootstrap for its CI)",
                             "budget_curve": BUDGET_CURVE_PROVENANCE}}
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


def reasoning_summary(tally: _BenchmarkTally) -> dict[str, Any]:
    """Thinking-model figures of one benchmark (issue 33): the share of samples whose reasoning never
    closed (over the samples graded with a reasoning state), the mean reasoning and answer tokens
    (reasoning: ``n_reasoning_tokens``, 0 for a sample with no reasoning; answer: the completion's
    tokens less those; null unless known for every sample: a mean over the samples that happen to
    have counts -- e.g. only those without reasoning -- would be biased), and how many extracted
    answers each grading rule changed from the whole completion's (``changed_by``)."""
    unclosed, n_states = tally.states
    return {"unclosed_reasoning_fraction": unclosed / n_states if n_states else None,
            "mean_reasoning_tokens": _mean_of_all(tally.reasoning_tokens, tally.n_rows),
            "mean_answer_tokens": _mean_of_all(tally.answer_tokens, tally.n_rows),
            "answers_changed_by_rule": dict(tally.changed),
            **({"reasoning_tokens_unknown": why} if (why := reasoning_tokens_unknown(tally)) else {})}


class TokenCounter:
    """Counts tokens with a model's tokenizer (``count(text)``), for samples that reason without a
    recorded count; ``n_counted`` samples were counted with it (recorded as provenance)."""

    def __init__(self, count: Any, name: str) -> None:
        self.count, self.name, self.n_counted = count, name, 0


def _counted(r: GradedSample, counter: TokenCounter) -> tuple[int, int | None]:
    """(reasoning tokens, answer tokens) of a sample that reasoned, counted with ``counter``: the
    reasoning field, else everything of the completion before its graded answer (an unclosed reasoning:
    the whole completion); the answer is the completion's count less the reasoning's when the completion
    was counted at generation, else counted too."""
    start, end = r.answer_span if r.answer_span is not None else (0, len(r.sample.completion))
    inline = r.sample.reasoning is None
    text = r.sample.completion[:start] if inline and end > start else r.sample.completion if inline else r.sample.reasoning
    n = counter.count(text)
    counter.n_counted += 1
    if r.sample.n_completion_tokens is not None and inline:
        return n, r.sample.n_completion_tokens - n
    return n, counter.count(r.answer_text) if end > start or not inline else 0


def reasoning_tokens_unknown(tally: _BenchmarkTally) -> str | None:
    """Why the mean reasoning (or answer) tokens of a benchmark are unknown, in words (None: known)."""
    no_count, no_completion = tally.uncounted
    if no_count:
        return (f"{no_count} of {tally.n_rows} samples reason without a recorded reasoning token count and no "
                "tokenizer of the model is known to count them (the run's config.json names no local model "
                "directory with a tokenizer; `dsdr-eval run` with a local engine records the counts)")
    if no_completion:
        return f"{no_completion} of {tally.n_rows} samples carry no completion token count (answer tokens unknown)"
    return None


def _mean_of_all(total: list[int] | None, n: int) -> float | None:
    """The mean when every value is known (``total`` not None), else None; token counts are integers,
    so the sum is exact and the mean is the one np.mean gives."""
    return total[0] / n if total is not None and n else None
