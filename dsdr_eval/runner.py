"""``dsdr-eval run``: plan -> generate (resumable, append-only) -> grade -> metrics -> diversity.

The plan is every (benchmark, phase, problem, sample_idx) the protocol asks for. It is cut into
requests (``n`` rollouts of one prompt, split to the backend's ``max_n_per_request``) and the
requests into batches, both from the *whole* plan, so a batch is the same on a rerun as on the
first run. A rerun skips batches whose samples are all in samples.jsonl, regenerates the others
and writes only the missing samples: after a crash or ``kill -9`` nothing is lost or doubled,
and with a seeded engine the regenerated text is the text the uninterrupted run would have
written (keys and seeds are derived from content, never from positions).
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.backends.base import Backend, GenerationRequest, RequestResult
from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.jsonl import append_jsonl
from dsdr_eval.rundir.json_values import to_json_safe
from dsdr_eval.progress import progress_bar
from dsdr_eval.prompts import PromptTemplate
from dsdr_eval.protocols import Phase, Protocol, derive_seed
from dsdr_eval.rundir.samples import Sample, SampleKey, SamplesFile, clean_text

FAILURES = rundir.FAILURES  # requests that failed after every retry (one line per failed sample)


@dataclass(frozen=True)
class BenchmarkData:
    name: str
    source: str
    problems: tuple[Any, ...]  # dsdr_eval.tasks.Problem

    def to_config(self) -> dict[str, Any]:
        ids = "\n".join(p.id for p in self.problems).encode("utf-8")
        return {"name": self.name, "source": self.source, "n_problems": len(self.problems),
                "ids_sha256": hashlib.sha256(ids).hexdigest()[:16]}


@dataclass(frozen=True)
class PlannedRequest:
    """One request of the plan: rollouts ``start_idx .. start_idx + n - 1`` of one (problem, phase)."""

    benchmark: str
    problem: Any  # Problem
    phase: Phase
    start_idx: int
    request: GenerationRequest

    def keys(self) -> list[SampleKey]:
        return [SampleKey(self.benchmark, self.phase.phase, self.problem.id, self.start_idx + j)
                for j in range(self.request.n)]


@dataclass
class GenerationOutcome:
    n_expected: int
    n_already_done: int
    n_written: int = 0
    n_failed: int = 0
    generate_s: float = 0.0  # wall time inside the backend, including write_s
    write_s: float = 0.0  # time spent building and appending sample lines (fsync included)
    failures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n_missing(self) -> int:
        return self.n_expected - self.n_already_done - self.n_written


def load_benchmarks(names: Sequence[str], *, data_dir: str | Path | None, limit: int | None,
                    subset_seed: int | None) -> list[BenchmarkData]:
    from dsdr_eval.tasks import load_benchmark, resolve_data_dir

    loaded, seen = [], set()
    for name in names:
        problems = load_benchmark(name, data_dir=data_dir, limit=limit, subset_seed=subset_seed)
        if not problems:
            raise DsdrError(f"benchmark {name}: no problems")
        bench_name = problems[0].benchmark
        if bench_name in seen:
            raise DsdrError(f"--benchmarks: {bench_name} listed twice")
        seen.add(bench_name)
        directory = resolve_data_dir(data_dir)
        local = directory / f"{name}.jsonl" if directory is not None else None
        source = str(local) if local is not None and local.is_file() else str(name)
        loaded.append(BenchmarkData(bench_name, source, tuple(problems)))
    return loaded


def expected_keys(benchmarks: Sequence[BenchmarkData], protocol: Protocol) -> set[SampleKey]:
    """Every sample key the protocol asks for (independent of how requests are split)."""
    return {SampleKey(b.name, phase.phase, p.id, idx) for b in benchmarks for phase in protocol.phases
            for p in b.problems for idx in range(phase.n)}


def plan_requests(benchmarks: Sequence[BenchmarkData], protocol: Protocol, backend: Backend,
                  template: PromptTemplate) -> list[PlannedRequest]:
    """Every request the protocol asks for, in a fixed order (benchmark, phase, problem, piece)."""
    piece = max(1, backend.max_n_per_request())
    plan: list[PlannedRequest] = []
    for bench in benchmarks:
        rendered = [backend.render(template, p.problem) for p in bench.problems]
        for phase in protocol.phases:
            for problem, (prompt, user_message) in zip(bench.problems, rendered):
                for start in range(0, phase.n, piece):
                    n = min(piece, phase.n - start)
                    seed = derive_seed(protocol.seed, bench.name, phase.phase, problem.id, start)
                    request = GenerationRequest(prompt, user_message, n, phase.temperature, phase.top_p,
                                                protocol.max_tokens, seed, top_k=phase.top_k, min_p=phase.min_p)
                    plan.append(PlannedRequest(bench.name, problem, phase, start, request))
    return plan


def sampling_record(plan: Sequence[PlannedRequest], backend: Backend) -> dict[str, Any]:
    """Per protocol phase, the sampling settings the backend actually uses, read back from the
    engine object it builds for the phase's first request (every request of a phase shares them;
    seeds are per request and stored with each sample). Recorded in config.json."""
    record: dict[str, Any] = {}
    for planned in plan:
        name = planned.phase.phase
        if name in record:
            continue
        effective = backend.effective_sampling(planned.request)
        if effective is not None:
            record[name] = {k: to_json_safe(v) for k, v in effective.items() if k != "seed"}
    return record


def pack_batches(plan: Sequence[PlannedRequest], *, capacity: int, max_prompts: int) -> list[list[int]]:
    """Consecutive requests with identical sampling settings, <= capacity rollouts and <= max_prompts
    requests per batch. Depends only on the plan, so reruns form the same batches."""
    batches: list[list[int]] = []
    current: list[int] = []
    current_key: tuple | None = None
    rollouts = 0
    for i, planned in enumerate(plan):
        r = planned.request
        key = (planned.benchmark, planned.phase.phase, r.n, r.temperature, r.top_p, r.max_tokens)
        if current and (key != current_key or rollouts + r.n > capacity or len(current) >= max_prompts):
            batches.append(current)
            current, rollouts = [], 0
        current.append(i)
        current_key = key
        rollouts += r.n
    if current:
        batches.append(current)
    return batches


def open_samples(samples_path: Path) -> SamplesFile:
    """samples.jsonl of a run being resumed (cutting a partial last line left by a crash first),
    validated; an absent file is an empty one. Errors name ``FILE:LINE:FIELD``."""
    return SamplesFile.open(samples_path, repair=True, missing_ok=True)


def new_sample(planned: PlannedRequest, j: int, completion: Any) -> Sample:
    """Rollout ``j`` of ``planned`` as a sample record (text cleaned: it must be writable as UTF-8)."""
    r = planned.request
    return Sample(
        benchmark=planned.benchmark, problem_id=planned.problem.id, sample_idx=planned.start_idx + j,
        phase=planned.phase.phase, problem=planned.problem.problem, gold=planned.problem.answer,
        answer_meta=getattr(planned.problem, "answer_meta", None),  # grading metadata (answer_norm)
        prompt=clean_text(r.prompt), completion=clean_text(completion.text),
        finish_reason=completion.finish_reason, n_prompt_tokens=completion.n_prompt_tokens,
        n_completion_tokens=completion.n_completion_tokens, temperature=r.temperature, top_p=r.top_p,
        max_tokens=r.max_tokens, seed=completion.seed if completion.seed is not None else r.seed,
        reasoning=None if completion.reasoning is None else clean_text(completion.reasoning),
        n_reasoning_tokens=completion.n_reasoning_tokens)


def generate_missing(run_dir: Path, plan: Sequence[PlannedRequest], backend: Backend, *,
                     samples: SamplesFile | None = None, progress: bool = True,
                     log: Callable[[str], None] = print) -> GenerationOutcome:
    """Generate every planned sample not yet in samples.jsonl, appending as batches finish.

    ``samples``: the run's samples.jsonl already opened (``open_samples``); it is appended to, so
    afterwards it holds every sample of the file without reading it again."""
    if samples is None:
        samples = open_samples(rundir.run_path(run_dir, rundir.SAMPLES))
    failures_path = run_dir / FAILURES
    done = samples.keys
    expected = {key for planned in plan for key in planned.keys()}
    stray = done - expected
    if stray:
        log(f"note: samples.jsonl holds {len(stray)} samples outside this plan (kept, graded as they are)")
    outcome = GenerationOutcome(n_expected=len(expected), n_already_done=len(done & expected))
    batches = pack_batches(plan, capacity=max(1, backend.batch_capacity()),
                           max_prompts=max(1, backend.max_prompts_per_batch()))
    pending = [b for b in batches if any(k not in done for i in b for k in plan[i].keys())]
    if not pending:
        return outcome
    lock = threading.Lock()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def on_results(results: list[tuple[int, RequestResult]]) -> None:
        with lock:
            t_write = time.perf_counter()
            new, failed = _collect(plan, results, done, started)
            samples.append(new)
            if failed:
                append_jsonl(failures_path, failed)
            outcome.n_written += len(new)
            outcome.n_failed += len(failed)
            outcome.failures.extend(failed)
            bar.advance(len(new) + len(failed))
            outcome.write_s += time.perf_counter() - t_write

    t0 = time.perf_counter()
    try:
        with progress_bar(outcome.n_expected - outcome.n_already_done, f"generate [{backend.name}]",
                          unit="rollout", enabled=progress) as bar:
            backend.generate([p.request for p in plan], pending, on_results)
    finally:
        outcome.generate_s = time.perf_counter() - t0
    return outcome


def _collect(plan: Sequence[PlannedRequest], results: list[tuple[int, RequestResult]], done: set[SampleKey],
             started: str) -> tuple[list[Sample], list[dict[str, Any]]]:
    """The new samples and failure lines of finished requests (a regenerated batch: only what is
    missing); marks their keys done."""
    new, failed = [], []
    for index, result in results:
        planned = plan[index]
        keys = planned.keys()
        if result.ok:
            for j, completion in enumerate(result.completions or ()):
                if keys[j] not in done:
                    new.append(new_sample(planned, j, completion))
                    done.add(keys[j])
        else:
            failed.extend({"benchmark": key.benchmark, "phase": key.phase, "problem_id": key.problem_id,
                           "sample_idx": key.sample_idx, "error": result.error, "attempts": result.attempts,
                           "where": result.where, "run_started": started}
                          for key in keys if key not in done)
    return new, failed


# ----------------------------------------------------------------------------- config checks

def check_resume_config(run_dir: Path, new_config: dict[str, Any], *, force: bool,
                        allow_mixed_models: bool = False) -> dict[str, Any] | None:
    """Refuse to mix runs: a RUN_DIR with a different model/protocol/template/benchmarks is an error
    unless ``force`` (``--force-config``); a different model whose samples would join the run's
    needs ``allow_mixed_models`` too. Returns the existing config (None for a fresh dir)."""
    config_path = rundir.run_path(run_dir, rundir.CONFIG)
    samples_path = rundir.run_path(run_dir, rundir.SAMPLES)
    if not config_path.exists():
        if samples_path.exists() and samples_path.stat().st_size > 0 and not force:
            raise DsdrError(f"{run_dir}: holds samples.jsonl but no config.json; refusing to add samples of "
                            "unknown settings (use another --out, or --force-config)")
        return None
    old = rundir.load_config(run_dir)
    if old.get("kind") != "eval" and not force:
        raise DsdrError(f"{config_path}: kind={old.get('kind')!r}, not an eval run directory")
    changes = rundir.identity_changes(old, new_config)
    differing = list(changes)
    if differing and not force:
        details = "; ".join(f"{k}: was {c['was']!r}, now {c['now']!r}" for k, c in changes.items())
        raise DsdrError(f"{config_path}: this run directory was made with a different "
                        f"{', '.join(differing)} ({details[:1500]}). Use another --out, or --force-config "
                        "to continue into it anyway" + (" (with --allow-mixed-models for a different model)"
                                                        if "model" in differing else ""))
    has_samples = samples_path.exists() and samples_path.stat().st_size > 0
    if "model" in differing and has_samples and not allow_mixed_models:
        raise DsdrError(f"{config_path}: this run directory holds samples of model {changes['model']['was']!r}; "
                        f"--force-config would add samples of {changes['model']['now']!r} to the same run. Use another "
                        "--out, or add --allow-mixed-models (config.json then records which samples came from "
                        "which model)")
    return old


def continuation_record(old_config: dict[str, Any], new_config: dict[str, Any], *, first_line: int,
                        n_outside_plan: int) -> dict[str, Any]:
    """The ``resumed`` entry of one continuation of a run (config.json keeps the first run's settings).

    ``first_line``: the samples.jsonl line this continuation's first sample goes to (the lines before
    it came from earlier entries). A continuation forced into different settings (``--force-config``)
    records under ``forced`` what changed (``was``/``now`` per identity field), its full settings and
    how many samples already in the file lie outside them (they are kept and scored)."""
    record: dict[str, Any] = {"at": rundir.now_iso(), "command": new_config.get("command"),
                              "backend": new_config.get("backend"), "first_line": first_line,
                              "n_generated": None}
    changed = rundir.identity_changes(old_config, new_config)
    if changed:
        record["forced"] = {
            "changed": changed,
            "settings": {k: new_config.get(k) for k in ("model", "protocol", "template", "benchmarks", "subset")},
            "n_samples_outside_settings": n_outside_plan,
        }
    return record


def add_continuation(config: dict[str, Any], record: dict[str, Any]) -> None:
    """Append ``record`` to config["resumed"]; a forced one also lists its fields under "mixed_settings"
    (so a reader knows the top-level settings do not describe every sample)."""
    config.setdefault("resumed", []).append(record)
    if "forced" in record:
        config["mixed_settings"] = sorted(set(config.get("mixed_settings") or ()) | set(record["forced"]["changed"]))


def run_diversity(run_dir: Path, graded: Sequence[Any], *, progress: bool) -> dict[str, Any]:
    """CPU diversity of the run (dsdr_eval.diversity_metrics) from the graded records scoring just wrote."""
    from dsdr_eval.diversity_metrics.run import compute_run_diversity

    return compute_run_diversity(run_dir, progress=progress, graded=graded)
