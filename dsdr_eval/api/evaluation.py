"""``dsdr-eval run`` as a library call: resolve, generate, grade and score one model on benchmarks into a
run directory (resumable), from a frozen ``RunOptions`` instead of an argparse Namespace.

``dsdr_eval.evaluate`` (the keyword API) and ``dsdr-eval run`` (the CLI) both call ``run_evaluation``;
the CLI adds the summary table. Heavy libraries (torch, transformers, vllm, openai) are imported inside
functions only.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from dsdr_eval.api.options import RunOptions
from dsdr_eval.errors import DsdrError, warn
from dsdr_eval.protocols import PROTOCOLS

# The engine seam: (backend name, resolved model) -> a dsdr_eval.backends.Backend.
EngineFactory = Callable[[str, Any], Any]


@dataclass(frozen=True)
class RunOutcome:
    """What one evaluation did: its exit code (1: samples still missing after every retry; rerun to
    retry them), the metrics.json it wrote and where the time went."""

    exit_code: int
    metrics: dict[str, Any] | None
    timings: dict[str, float] = field(default_factory=dict)
    n_failed: int = 0
    n_missing: int = 0
    out: Path | None = None  # the run directory
    backend: dict[str, Any] = field(default_factory=dict)  # config.json's backend record (name, version ...)
    protocol: Any = None  # the dsdr_eval.protocols.Protocol the run used


def resolve_run_model(options: RunOptions, backend_name: str) -> Any:
    """The model of the run; ``options.model`` may already be a ``dsdr_eval.models.ResolvedModel``."""
    from dsdr_eval.models import ResolvedModel, resolve_model

    if isinstance(options.model, ResolvedModel):
        return options.model
    if backend_name == "openai" and not Path(options.model).expanduser().exists():
        return ResolvedModel(options.model, options.model, False, None, options.revision)  # a served model name
    return resolve_model(options.model, revision=options.revision)


def make_backend(name: str, options: RunOptions, model: Any, protocol_seed: int,
                 openai_options: tuple[Any, dict[str, Any] | None] | None) -> Any:
    """The engine ``name`` (hf, vllm, openai) for ``model``, built from the backend options."""
    if name == "hf":
        from dsdr_eval.backends.hf import HFBackend

        return HFBackend(model.path, device=options.device, dtype=options.dtype, batch_size=options.batch_size,
                         prompt_mode=options.prompt_mode, revision=model.revision,
                         chat_template_kwargs=chat_template_kwargs(options))
    if name == "vllm":
        from dsdr_eval.backends.vllm import VLLMBackend

        return VLLMBackend(model.path, dtype=options.dtype, tensor_parallel_size=options.tensor_parallel_size,
                           data_parallel_size=options.data_parallel_size,
                           gpu_memory_utilization=options.gpu_memory_utilization, max_model_len=options.max_model_len,
                           chunk_size=options.chunk_size, prompt_mode=options.prompt_mode, revision=model.revision,
                           enforce_eager=options.enforce_eager, seed=protocol_seed,
                           chat_template_kwargs=chat_template_kwargs(options))
    if name == "openai":
        from dsdr_eval.backends.openai import OpenAIBackend

        endpoint, extra = openai_options
        tokenizer = options.tokenizer or (model.path if model.is_local else None)
        return OpenAIBackend(endpoint, api=options.api, tokenizer_path=tokenizer, prompt_mode=options.prompt_mode,
                             extra_body=extra, chat_template_kwargs=chat_template_kwargs(options))
    raise DsdrError(f"--backend {name}: unknown")


def _json_object(text: str, option: str) -> dict[str, Any]:
    """The JSON object an option's value spells; a one-line DsdrError naming the option otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DsdrError(f"{option}: invalid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise DsdrError(f"{option}: expected a JSON object")
    return value


def chat_template_kwargs(options: RunOptions) -> dict[str, Any]:
    """``--chat-template-kwargs JSON``: extra variables of the chat template (e.g. ``{"enable_thinking":
    false}``), checked: a JSON object; {} when not given."""
    if options.chat_template_kwargs is None:
        return {}
    return _json_object(options.chat_template_kwargs, "--chat-template-kwargs")


def _openai_options(options: RunOptions) -> tuple[Any, dict[str, Any] | None]:
    """The endpoint and --extra-body of ``--backend openai``, checked (cheap: no connection made)."""
    from dsdr_eval.cli.args import MODEL_ENDPOINT, endpoint_config  # the endpoint options, spelled as the CLI's
    from dsdr_eval.openai_api.client import split_base_urls

    if not split_base_urls(options.base_url):
        raise DsdrError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
    extra = _json_object(options.extra_body, "--extra-body") if options.extra_body else None
    return endpoint_config(options, MODEL_ENDPOINT, model=options.model), extra


def _auto_choice(requested: str, benchmarks: list[Any], protocol: Any) -> Any:
    """``--backend auto``: the backend for this run's size (dsdr_eval/backends/__init__.py); None otherwise."""
    if requested != "auto":
        return None
    from dsdr_eval.backends import Workload, choose_backend

    workload = Workload(n_problems=sum(len(b.problems) for b in benchmarks),
                        rollouts_per_problem=sum(phase.n for phase in protocol.phases),
                        max_tokens=protocol.max_tokens)
    choice = choose_backend(workload)
    print(f"--backend auto: {choice.chosen} ({choice.reason})")
    return choice


def run_evaluation(options: RunOptions, *, command: list[str] | None = None,
                   engine: EngineFactory | None = None) -> RunOutcome:
    """Evaluate ``options.model`` into ``options.out``, holding its writer lock (one writer per run
    directory). ``command`` is what config.json records as the command (default ``sys.argv``);
    ``engine(backend_name, resolved_model)`` builds the backend instead of ``make_backend``: the seam
    for a fake or an already-loaded engine (it is closed when the run ends)."""
    from dsdr_eval.rundir import directory as rundir

    with rundir.writer_lock(options.out):
        return _run_locked(options, command, engine)


def _run_locked(options: RunOptions, argv: list[str] | None, engine: EngineFactory | None) -> RunOutcome:
    from dsdr_eval.rundir import directory as rundir
    from dsdr_eval.prompts import load_template
    from dsdr_eval.protocols import apply_overrides, protocol_file_record, resolve_protocol
    from dsdr_eval import runner

    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    progress = not options.no_progress
    protocol = apply_overrides(resolve_protocol(options.protocol), n=options.n, temperature=options.temperature,
                               top_p=options.top_p, pass1_temperature=options.pass1_temperature,
                               pass1_top_p=options.pass1_top_p, max_tokens=options.max_tokens, seed=options.seed,
                               phases=options.phases)
    template = load_template(options.template)
    # every --backend openai argument is checked before anything is resolved or loaded (auto is never openai)
    openai_options = _openai_options(options) if options.backend == "openai" else None
    benchmarks = runner.load_benchmarks(options.benchmarks, data_dir=options.data_dir, limit=options.limit,
                                        subset_seed=options.subset_seed)
    from dsdr_eval.grading.extraction import choose_extraction
    from dsdr_eval.grading.reasoning import parse_reasoning_format
    from dsdr_eval.tasks import benchmark_extraction

    extraction = choose_extraction(options.extraction, protocol.extraction,
                                   {b.name: benchmark_extraction(b.name) for b in benchmarks})
    auto = _auto_choice(options.backend, benchmarks, protocol)
    backend_name = auto.chosen if auto is not None else options.backend
    model = resolve_run_model(options, backend_name)
    out = Path(options.out)
    config: dict[str, Any] = {
        "kind": "eval", "label": options.label, "command": list(argv if argv is not None else sys.argv),
        "model": model.to_config(),
        "backend": {"name": backend_name, **({"auto": auto.to_config()} if auto is not None else {})},
        "protocol": protocol.to_config(),
        # a file protocol: where its definition came from (the run identity is `protocol` itself)
        **({} if options.protocol in PROTOCOLS else {"protocol_file": protocol_file_record(Path(options.protocol))}),
        "template": {"name": template.name, "text": template.text, "raw_text": template.raw_text,
                     "mode": options.prompt_mode, "chat": None,
                     # part of the run identity (they change the prompt); absent when not given
                     **({"chat_template_kwargs": chat_template_kwargs(options)}
                        if options.chat_template_kwargs is not None else {})},
        "benchmarks": [b.to_config() for b in benchmarks],
        "subset": {"limit": options.limit, "subset_seed": options.subset_seed},
        "grading": {"timeout_s": options.grading_timeout, "workers": options.grading_workers},
        "extraction": extraction,  # the answer convention `score` reads back (not part of the run identity)
        # how `score` splits a thinking model's reasoning from its answer (absent: auto; not identity either)
        **({"reasoning_format": parse_reasoning_format(options.reasoning_format).spec}
           if options.reasoning_format is not None else {}),
        "diversity": {"enabled": not options.no_diversity},
    }
    # Refuse a mismatched RUN_DIR before paying for an engine start.
    old_config = runner.check_resume_config(out, config, force=options.force_config,
                                            allow_mixed_models=options.allow_mixed_models)
    out.mkdir(parents=True, exist_ok=True)

    # samples.jsonl is read (validated, hashed) once here; generation appends to this object and
    # scoring takes it, so neither reads the file again.
    samples = runner.open_samples(rundir.run_path(out, rundir.SAMPLES))
    expected = runner.expected_keys(benchmarks, protocol)
    done = samples.keys
    continuation = _continuation(out, old_config, config, samples, expected)
    if continuation is not None and old_config is not None and expected <= done:
        # Everything is generated: re-grade and re-score without starting an engine.
        print(f"all {len(expected)} samples already in {out / rundir.SAMPLES}; nothing to generate")
        outcome = runner.GenerationOutcome(n_expected=len(expected), n_already_done=len(expected))
        config["backend"] = old_config.get("backend", config["backend"])
        if "forced" in continuation:
            _record_forced_without_generation(out, old_config, continuation)
        timings["load_s"] = time.perf_counter() - t_start
    else:
        backend = (engine(backend_name, model) if engine is not None
                   else make_backend(backend_name, options, model, protocol.seed, openai_options))
        outcome = _generate(out, backend, _Plan(options, protocol, template, benchmarks, config, old_config,
                                                continuation, samples), timings, t_start)
    # a resumed run keeps its recorded convention unless --extraction says otherwise (None: config.json's)
    grading_extraction = extraction if old_config is None else options.extraction
    return _finish(out, options, protocol, config, outcome, timings, t_start, progress, samples, grading_extraction)


def _continuation(out: Path, old_config: dict[str, Any] | None, config: dict[str, Any], samples: Any,
                  expected: set) -> dict[str, Any] | None:
    """The ``resumed`` record of a rerun into a RUN_DIR that holds samples (None for a fresh run)."""
    from dsdr_eval import runner

    done = samples.keys
    if old_config is None or not done:
        if done:  # --force-config into samples of unknown settings (no config.json)
            config["adopted_samples"] = {"n": len(done), "lines": [1, samples.n_lines],
                                         "note": "already in samples.jsonl, of unknown settings (--force-config)"}
        return None  # nothing generated yet: this run's settings are the run's
    continuation = runner.continuation_record(old_config, config, first_line=samples.n_lines + 1,
                                              n_outside_plan=len(done - expected))
    if "forced" in continuation:
        warn(f"--force-config: {out} was made with another {', '.join(continuation['forced']['changed'])}; "
                    "config.json keeps its first settings and records this continuation, with what changed and "
                    f"the samples.jsonl lines it writes (from line {continuation['first_line']}), under 'resumed'")
    return continuation


def _record_forced_without_generation(out: Path, old_config: dict[str, Any], continuation: dict[str, Any]) -> None:
    """A forced rerun that has nothing to generate (e.g. a smaller --n) is recorded, and says so."""
    from dsdr_eval import runner
    from dsdr_eval.rundir import directory as rundir

    continuation.update(backend=None, n_generated=0)
    runner.add_continuation(old_config, continuation)
    rundir.save_config(out, old_config)
    outside = continuation["forced"]["n_samples_outside_settings"]
    if outside:
        warn(f"{outside} samples in {rundir.run_path(out, rundir.SAMPLES)} lie outside the forced settings "
                    "(e.g. sample_idx beyond the new n); they are kept and scored with the others, so the metrics "
                    "are those of the samples in the file (recorded under 'resumed' in config.json)")


@dataclass(frozen=True)
class _Plan:
    """What generation needs besides the backend (the config dicts are updated in place)."""

    options: RunOptions
    protocol: Any
    template: Any
    benchmarks: list[Any]
    config: dict[str, Any]
    old_config: dict[str, Any] | None
    continuation: dict[str, Any] | None
    samples: Any


def _generate(out: Path, backend: Any, job: _Plan, timings: dict[str, float], t_start: float) -> Any:
    from dsdr_eval import runner
    from dsdr_eval.rundir import directory as rundir

    options, config, old_config, continuation = job.options, job.config, job.old_config, job.continuation
    progress = not options.no_progress
    preload = None
    try:
        t0 = time.perf_counter()
        plan = runner.plan_requests(job.benchmarks, job.protocol, backend, job.template)
        timings["plan_s"] = time.perf_counter() - t0
        auto = {"auto": config["backend"]["auto"]} if "auto" in config["backend"] else {}
        config["backend"] = dict(backend.config(), **auto, sampling=runner.sampling_record(plan, backend))
        config["template"]["chat"] = backend.chat
        if continuation is not None and old_config is not None:
            # Resume: keep the original record, note each continuation, the backend it used and
            # (forced) the settings that changed.
            continuation["backend"] = config["backend"]
            runner.add_continuation(old_config, continuation)
            rundir.save_config(out, old_config)
        else:
            rundir.save_config(out, config)
        timings["load_s"] = time.perf_counter() - t_start - timings["plan_s"]
        if not options.no_diversity:  # the encoder loads while the backend generates, not after it
            from dsdr_eval.diversity_metrics.semantic import preload_encoder

            preload = preload_encoder()
        outcome = runner.generate_missing(out, plan, backend, samples=job.samples, progress=progress)
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


def _finish(out: Path, options: RunOptions, protocol: Any, config: dict[str, Any], outcome: Any,
            timings: dict[str, float], t_start: float, progress: bool, samples: Any,
            extraction: str | None = None) -> RunOutcome:
    """Grade, score and (unless no_diversity) compute the diversity of the run directory's samples."""
    from dsdr_eval import runner
    from dsdr_eval.rundir import directory as rundir

    timings["generate_s"] = outcome.generate_s
    timings["write_s"] = outcome.write_s

    from dsdr_eval.scoring import score_run_records

    t0 = time.perf_counter()
    graded, metrics = score_run_records(out, timeout_s=options.grading_timeout, workers=options.grading_workers,
                                        progress=progress, samples=samples, extraction=extraction,
                                        reasoning_format=options.reasoning_format)
    timings["score_s"] = time.perf_counter() - t0
    if not options.no_diversity:
        t0 = time.perf_counter()
        diversity = runner.run_diversity(out, graded, progress=progress)
        timings["diversity_s"] = time.perf_counter() - t0
        for name, block in diversity.items():  # what rundir.update_metrics merged into metrics.json
            metrics["benchmarks"].setdefault(name, {})[rundir.DIVERSITY_SECTION] = block
    timings["total_s"] = time.perf_counter() - t_start

    exit_code = 1 if outcome.n_missing > 0 else 0
    return RunOutcome(exit_code, metrics, timings, outcome.n_failed, outcome.n_missing, out=out,
                      backend=dict(config["backend"]), protocol=protocol)
