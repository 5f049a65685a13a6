"""Step 3 of ``dsdr-eval run``: generation, resumable and append-only.

The plan is cut into requests (``n`` rollouts of one prompt, split to the backend's
``max_n_per_request``) and the requests into batches, both from the *whole* plan, so a request and
a batch are the same on a rerun as on the first run (keys and seeds are derived from content, never
from positions). A rerun skips batches whose samples are all in samples.jsonl, regenerates
the others and writes only the missing samples: after a crash or ``kill -9`` nothing is lost or
doubled, and with a seeded engine the regenerated text is the text the uninterrupted run would have
written. Heavy libraries (torch, transformers, vllm, openai) are imported by the backend modules,
inside ``make_backend`` only.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from dsdr_eval.backends.base import Backend, GenerationRequest, RequestResult
from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.reasoning import DEFAULT_REASONING_FORMAT
from dsdr_eval.options.commands import RunOptions
from dsdr_eval.progress import progress_bar
from dsdr_eval.prompts import PromptTemplate
from dsdr_eval.protocols import Phase, Protocol, derive_seed
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.rundir.json_values import to_json_safe
from dsdr_eval.rundir.jsonl import append_jsonl
from dsdr_eval.rundir.samples import Sample, SampleKey, SamplesFile, clean_text
from dsdr_eval.run.plan import BenchmarkData, RunPlan
from dsdr_eval.run.resume import Resume, add_continuation, open_samples, record_forced_without_generation
from dsdr_eval.run.shard import check_same_units, shard_record

FAILURES = rundir.FAILURES  # requests that failed after every retry (one line per failed sample)

# The engine seam: (backend name, resolved model) -> a dsdr_eval.backends.Backend.
EngineFactory = Callable[[str, Any], Any]


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


def nothing_to_generate(plan: RunPlan, resume: Resume) -> GenerationOutcome:
    """Every sample is already there: no engine starts; config.json keeps the backend that generated
    them, and a forced rerun is recorded."""
    assert resume.old_config is not None and resume.continuation is not None  # Resume.all_generated
    print(f"all {len(resume.expected)} samples already in {plan.out / rundir.SAMPLES}; nothing to generate")
    plan.config["backend"] = resume.old_config.get("backend", plan.config["backend"])
    if "forced" in resume.continuation:
        record_forced_without_generation(plan.out, resume.old_config, resume.continuation)
    return GenerationOutcome(n_expected=len(resume.expected), n_already_done=len(resume.expected))


def generate(plan: RunPlan, resume: Resume, backend: Any, *, progress: bool, preload_encoder: bool,
             timings: dict[str, float], t_start: float) -> GenerationOutcome:
    """Plan the requests with ``backend``, write config.json (a rerun: the first run's, with this
    continuation under ``resumed``) and generate every missing sample; the backend is closed after.
    ``preload_encoder``: the diversity encoder loads while the backend generates, not after it."""
    out, config, old_config, continuation = plan.out, plan.config, resume.old_config, resume.continuation
    preload = None
    try:
        t0 = time.perf_counter()
        requests = plan_requests(plan.benchmarks, plan.protocol, backend, plan.template)
        batches = shard_batches(requests, backend, plan, old_config)
        timings["plan_s"] = time.perf_counter() - t0
        auto = {k: config["backend"][k] for k in ("auto", "threads") if k in config["backend"]}
        config["backend"] = dict(backend.config(), **auto, sampling=sampling_record(requests, backend))
        config["template"]["chat"] = backend.chat
        if continuation is not None and old_config is not None:
            # Resume: keep the original record, note each continuation, the backend it used and
            # (forced) the settings that changed.
            continuation["backend"] = config["backend"]
            add_continuation(old_config, continuation)
            rundir.save_config(out, old_config)
        else:
            rundir.save_config(out, config)
        timings["load_s"] = time.perf_counter() - t_start - timings["plan_s"]
        if preload_encoder:
            from dsdr_eval.diversity_metrics.semantic import preload_encoder as preload_in_background

            preload = preload_in_background()
        outcome = generate_missing(out, requests, backend, samples=resume.samples, progress=progress, batches=batches)
    finally:
        backend.close()
        if preload is not None:  # usually done by now; never left loading after the run returns
            preload.join()
    if continuation is not None and old_config is not None:
        continuation["n_generated"] = outcome.n_written  # lines first_line .. first_line + n_generated - 1
        rundir.save_config(out, old_config)
    if outcome.n_already_done:
        print(f"resumed: {outcome.n_already_done} of {outcome.n_expected} samples were already in "
              f"{out / rundir.SAMPLES}; generated {outcome.n_written}")
    return outcome


def make_backend(plan: RunPlan, options: RunOptions) -> Any:
    """The engine the plan names, wrapped in budget forcing with ``--thinking-budget`` (dsdr_eval.run.forcing;
    recorded as config.json ``budget_forcing``)."""
    backend = _engine(plan, options)
    if options.thinking_budget is None:
        return backend
    from dsdr_eval.run.forcing import BudgetForcing, ForcingSettings

    settings = ForcingSettings(options.thinking_budget, options.answer_budget)
    try:
        wrapped = BudgetForcing(backend, settings)
    except DsdrError:
        backend.close()
        raise
    plan.config["budget_forcing"] = settings.to_config()
    return wrapped


def _engine(plan: RunPlan, options: RunOptions) -> Any:
    """The engine the plan names (hf, vllm, openai) for its model, built from the backend options (a local
    engine counts each completion's inline reasoning tokens with the run's ``--reasoning-format``)."""
    name, model, kwargs = plan.backend_name, plan.model, plan.chat_template_kwargs
    reasoning = options.reasoning_format or DEFAULT_REASONING_FORMAT
    if name == "hf":
        from dsdr_eval.backends.hf import HFBackend

        return HFBackend(model.path, device=options.device, dtype=options.dtype, batch_size=options.batch_size,
                         prompt_mode=options.prompt_mode, revision=model.revision, chat_template_kwargs=kwargs,
                         reasoning_format=reasoning)
    if name == "vllm":
        from dsdr_eval.backends.vllm import VLLMBackend

        return VLLMBackend(model.path, dtype=options.dtype, tensor_parallel_size=options.tensor_parallel_size,
                           data_parallel_size=options.data_parallel_size,
                           gpu_memory_utilization=options.gpu_memory_utilization, max_model_len=options.max_model_len,
                           chunk_size=options.chunk_size, prompt_mode=options.prompt_mode, revision=model.revision,
                           enforce_eager=options.enforce_eager, seed=plan.protocol.seed, chat_template_kwargs=kwargs,
                           reasoning_format=reasoning)
    if name == "openai":
        from dsdr_eval.backends.openai import OpenAIBackend

        endpoint, extra = plan.openai
        tokenizer = options.tokenizer or (model.path if model.is_local else None)
        return OpenAIBackend(endpoint, api=options.api, tokenizer_path=tokenizer, prompt_mode=options.prompt_mode,
                             extra_body=extra, chat_template_kwargs=kwargs)
    raise DsdrError(f"--backend {name}: unknown")


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
                                                protocol.max_tokens, seed, top_k=phase.top_k, min_p=phase.min_p,
                                                stop=protocol.stop)
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
        key = (planned.benchmark, planned.phase.phase, r.n, r.temperature, r.top_p, r.top_k, r.min_p, r.max_tokens)
        if current and (key != current_key or rollouts + r.n > capacity or len(current) >= max_prompts):
            batches.append(current)
            current, rollouts = [], 0
        current.append(i)
        current_key = key
        rollouts += r.n
    if current:
        batches.append(current)
    return batches


def _pack(plan: Sequence[PlannedRequest], backend: Backend) -> list[list[int]]:
    return pack_batches(plan, capacity=max(1, backend.batch_capacity()),
                        max_prompts=max(1, backend.max_prompts_per_batch()))


def shard_batches(plan: Sequence[PlannedRequest], backend: Backend, run: RunPlan,
                  old_config: dict[str, Any] | None) -> list[list[int]] | None:
    """The batches of ``run --shard I/N`` (None: the whole plan's), cut by what one seed covers
    (``dsdr_eval.run.shard``); completes config.json's ``shard`` record and refuses a rerun that cuts
    the shard otherwise."""
    if run.shard is None:
        return None
    unit = getattr(backend, "seed_scope", "batch")  # an engine that does not say: its batches, the safe unit
    if unit == "request":  # each request carries its seed: pack the shard's own requests
        n_units_run, mine = len(plan), run.shard.units(len(plan))
        batches = [[mine[j] for j in batch] for batch in _pack([plan[i] for i in mine], backend)]
    else:  # one seed per batch: the whole run's batches, every N-th
        whole = _pack(plan, backend)
        unit, n_units_run, mine = "batch", len(whole), run.shard.units(len(whole))
        batches = [whole[k] for k in mine]
    keys = {key for batch in batches for i in batch for key in plan[i].keys()}
    n_run = sum(planned.request.n for planned in plan)
    record = shard_record(run.shard, unit=unit, n_units=len(mine), n_units_run=n_units_run, keys=keys,
                          n_samples_run=n_run)
    check_same_units(run.out, old_config, record)
    run.config["shard"] = record
    print(f"shard {run.shard.spec}: {len(keys)} of the run's {n_run} samples ({len(mine)} of {record['n_units_run']} "
          f"{unit}{'es' if unit == 'batch' else 's'}); join the {run.shard.count} shards with `dsdr-eval merge`")
    return batches


def generate_missing(run_dir: Path, plan: Sequence[PlannedRequest], backend: Backend, *,
                     samples: SamplesFile | None = None, progress: bool = True,
                     log: Callable[[str], None] = print, batches: list[list[int]] | None = None) -> GenerationOutcome:
    """Generate every planned sample not yet in samples.jsonl, appending as batches finish.

    ``samples``: the run's samples.jsonl already opened (``open_samples``); it is appended to, so
    afterwards it holds every sample of the file without reading it again. ``batches``: the part of
    the plan to generate (a shard's, ``shard_batches``); default the whole plan."""
    if samples is None:
        samples = open_samples(rundir.run_path(run_dir, rundir.SAMPLES))
    failures_path = run_dir / FAILURES
    done = samples.keys
    batches = _pack(plan, backend) if batches is None else batches
    expected = {key for batch in batches for i in batch for key in plan[i].keys()}
    stray = done - expected
    if stray:
        log(f"note: samples.jsonl holds {len(stray)} samples outside this plan (kept, graded as they are)")
    outcome = GenerationOutcome(n_expected=len(expected), n_already_done=len(done & expected))
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
        n_reasoning_tokens=completion.n_reasoning_tokens,
        # budget forcing: where the reasoning ended (forced at N or natural) and what was inserted
        extra={"budget_forcing": completion.forcing} if completion.forcing is not None else {})


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

